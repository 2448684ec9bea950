/** Every plain `===`/`!==`/`==`/`!=` comparison of a secret in `text`, by 1-based line. */
export function plainSecretComparisons(fileName: string, text: string): Array<{ line: number; text: string }>;
