/** Types of scripts/build-client.mjs, for the tests that import it. */
export declare const PACKAGE_DIR: string;
export declare const SHIPPABLE: readonly string[];
export declare const SERVER_PACKAGES: readonly string[];
export declare function importsOf(text: string): string[];
export declare function packageOf(specifier: string): string;
export declare function packageProblems(files: readonly { path: string; text: string }[]): string[];
export declare function build(): { files: number; dependencies: Record<string, string> };
