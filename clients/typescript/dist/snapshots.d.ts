/** Opt-in offline fallback: the last bundle started on per (bundle, label or version), saved as
 * the registry's exact bytes, written atomically. Needs a file system (node:fs, as Node, Deno
 * and Bun provide); where there is none, saving and loading do nothing. */
import { Bundle } from "./core.js";
import type { Unavailable } from "./errors.js";
export declare class Snapshots {
    readonly directory: string;
    constructor(directory: string);
    private path;
    save(pinned: Bundle, label?: string, version?: number): Promise<void>;
    load(bundle: string, label?: string, version?: number): Promise<Bundle | null>;
}
/** Never silently: a warning on the console (and a process warning where there is one). */
export declare function warnOffline(bundle: Bundle, label: string | undefined, reason: Unavailable): void;
