// A directory laid out and updated the way the kubelet mounts a ConfigMap: each version in a hidden timestamped
// directory, `..data` a symlink to the current one, and each key a symlink through `..data`. An update writes the
// new version beside the old, then swaps `..data` in one rename, so a reader never sees a half-written file.
import { mkdirSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";

let versions = 0;

export interface ConfigMapMount {
  readonly dir: string;
  /** The path the runtime is given, as a pod would see `<mountPath>/<key>`. */
  readonly path: string;
  /** Swaps in new contents atomically, as the kubelet does on a ConfigMap update. */
  update(data: Record<string, string>): void;
}

export function configMapMount(dir: string, data: Record<string, string>, key = "config.yaml"): ConfigMapMount {
  mkdirSync(dir, { recursive: true });
  const writeVersion = (d: Record<string, string>): string => {
    const name = `..${new Date().toISOString().replace(/[:.]/g, "_")}.${versions++}`;
    mkdirSync(join(dir, name));
    for (const [k, v] of Object.entries(d)) writeFileSync(join(dir, name, k), v);
    return name;
  };
  symlinkSync(writeVersion(data), join(dir, "..data"));
  for (const k of Object.keys(data)) symlinkSync(join("..data", k), join(dir, k));
  return {
    dir,
    path: join(dir, key),
    update(d) {
      const old = readlinkSync(join(dir, "..data"));
      const next = writeVersion(d);
      symlinkSync(next, join(dir, "..data_tmp"));
      renameSync(join(dir, "..data_tmp"), join(dir, "..data"));
      rmSync(join(dir, old), { recursive: true, force: true });
    },
  };
}

/** A ConfigMap mount holding one runtime config, given as an object and written as YAML. */
export function runtimeConfigMount(dir: string, config: Record<string, unknown>) {
  const mount = configMapMount(dir, { "config.yaml": stringify(config) });
  return { ...mount, set: (c: Record<string, unknown>) => mount.update({ "config.yaml": stringify(c) }) };
}
