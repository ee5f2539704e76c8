/** Opt-in offline fallback: the last bundle started on per (bundle, label or version), saved as
 * the registry's exact bytes, written atomically. Needs a file system (node:fs, as Node, Deno
 * and Bun provide); where there is none, saving and loading do nothing. */
import { Bundle } from "./core.js";
async function fileSystem() {
    try {
        return await import("node:fs/promises");
    }
    catch {
        return null;
    }
}
export class Snapshots {
    directory;
    constructor(directory) {
        this.directory = directory;
    }
    path(bundle, label, version) {
        // Bundle and label names are [a-z0-9._-]: safe as file names as they are.
        const which = version !== undefined ? `v${version}` : label ?? "production";
        return `${this.directory.replace(/\/+$/, "")}/${bundle}@${which}.json`;
    }
    async save(pinned, label, version) {
        const fs = await fileSystem();
        if (fs === null)
            return;
        const target = this.path(pinned.name, label, version);
        const tmp = `${this.directory}/.tmp-${crypto.randomUUID()}.json`;
        try {
            await fs.mkdir(this.directory, { recursive: true });
            await fs.writeFile(tmp, pinned.raw);
            await fs.rename(tmp, target);
        }
        catch (exc) {
            // A full disk must not fail a session that the registry started.
            console.warn(`promptreg: could not save the offline snapshot of ${pinned.name}: ${exc}`);
            await fs.rm(tmp, { force: true }).catch(() => undefined);
        }
    }
    async load(bundle, label, version) {
        const fs = await fileSystem();
        if (fs === null)
            return null;
        const path = this.path(bundle, label, version);
        let raw;
        try {
            raw = new Uint8Array(await fs.readFile(path));
        }
        catch {
            return null;
        }
        try {
            return await Bundle.fromBody(raw);
        }
        catch (exc) {
            console.warn(`promptreg: ignoring the unreadable snapshot ${path}: ${exc}`);
            return null;
        }
    }
}
/** Never silently: a warning on the console (and a process warning where there is one). */
export function warnOffline(bundle, label, reason) {
    const message = `promptreg: the registry is unreachable (${reason.message}); session on ${bundle.name} ` +
        `${label ?? "production"} served OFFLINE from a local snapshot of v${bundle.version} ` +
        `(${bundle.contentHash.slice(0, 12)}). It is not pinned on the server and may be outdated.`;
    const proc = globalThis.process;
    if (proc?.emitWarning)
        proc.emitWarning(message, "OfflineWarning");
    else
        console.warn(message);
}
