import { createMemoryStore } from "../../src/store/memory/index.js";
import { runStoreContract } from "./contract.js";

runStoreContract("memory", async () => createMemoryStore());
