// Watches the config cascade for changes. A ConfigMap mount changes by an atomic swap of a `..data` symlink beside
// the file, so the file's directory is watched, not the file; a slow poll backs the watch up on filesystems whose
// events are unreliable (overlay, NFS), and also notices a config file that appears where none was.
import { watch, type FSWatcher } from "node:fs";
import { dirname } from "node:path";
import { ConfigError } from "../errors.ts";
import { loadConfig, type LoadedConfig } from "./load.ts";

export type ConfigRead = { ok: true; loaded: LoadedConfig } | { ok: false; error: ConfigError };

export interface ConfigWatcher {
  close(): void;
}

export interface WatchOptions {
  argv: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  /** The file the running config came from, if any: its directory is watched. */
  file: string | undefined;
  /** Called with every read whose outcome differs from the previous one (a new config, or a new refusal). */
  onChange(read: ConfigRead): void;
  pollMs?: number;
  /** Events of one swap arrive in a burst; the read waits this long after the last. */
  debounceMs?: number;
}

/** The comparable identity of a read: the resolved config, or the refusal's message. */
function identity(read: ConfigRead): string {
  return read.ok ? JSON.stringify(read.loaded.config) : `error:${read.error.message}`;
}

export function readConfig(argv: string[], env: NodeJS.ProcessEnv, cwd: string): ConfigRead {
  try {
    return { ok: true, loaded: loadConfig({ argv, env, cwd }) };
  } catch (err) {
    if (err instanceof ConfigError) return { ok: false, error: err };
    throw err;
  }
}

export function watchConfig(opts: WatchOptions, current: LoadedConfig): ConfigWatcher {
  let last = identity({ ok: true, loaded: current });
  let watchedDir: string | undefined;
  let watcher: FSWatcher | undefined;
  let debounce: NodeJS.Timeout | undefined;

  const rewatch = (file: string | undefined) => {
    const dir = file === undefined ? undefined : dirname(file);
    if (dir === watchedDir) return;
    watcher?.close();
    watcher = undefined;
    watchedDir = dir;
    if (dir === undefined) return;
    try {
      watcher = watch(dir, { persistent: false }, () => {
        clearTimeout(debounce);
        debounce = setTimeout(check, opts.debounceMs ?? 200);
        debounce.unref();
      });
      // A directory that goes away (unmounted) leaves the poll to notice what comes next.
      watcher.on("error", () => rewatch(undefined));
    } catch {
      watchedDir = undefined;
    }
  };

  const check = () => {
    const read = readConfig(opts.argv, opts.env, opts.cwd);
    if (read.ok) rewatch(read.loaded.file);
    const id = identity(read);
    if (id === last) return;
    last = id;
    opts.onChange(read);
  };

  rewatch(current.file);
  const poll = setInterval(check, opts.pollMs ?? 5000);
  poll.unref();
  return {
    close() {
      clearInterval(poll);
      clearTimeout(debounce);
      watcher?.close();
    },
  };
}
