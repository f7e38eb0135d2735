// The store a destination URL names. A file:// destination writes in place; s3, minio, gs and az stage each file
// under <spool_dir>/uploads and upload it whole once it completes. What a previous process left (staged files, or a
// local destination's half-written files) is settled before anything new is written.
import { resolve } from "node:path";
import type { Logger } from "pino";
import type { ResolvedConfig } from "../config/resolve.ts";
import type { Metrics } from "../observe/metrics.ts";
import { createFileStore } from "./file.ts";
import { openObjectBackend } from "./object/open.ts";
import { PartialJournal, partialsDir, settlePartials } from "./partials.ts";
import { Quarantine } from "./quarantine.ts";
import { uploadsDir } from "./manifest.ts";
import { recoverStaging } from "./recovery.ts";
import { checkSpoolFree, resolveSpoolBudget } from "./spool.ts";
import { createStagingStore, type StagingStore } from "./staging.ts";
import type { ArchiveStore } from "./types.ts";

export interface OpenedStore {
  readonly store: ArchiveStore;
  /** Present for object destinations: uploads, their gauges and the shutdown drain. */
  readonly staging?: StagingStore;
}

export async function openStore(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
  metrics: Metrics,
  log: Logger,
): Promise<OpenedStore> {
  const destination = cfg.archive.destination ?? "";
  if (destination.startsWith("file:")) {
    const dir = partialsDir(cfg.buffer.spool_dir);
    await settlePartials({
      dir,
      mode: cfg.offsetsHeld ? "remove" : "quarantine",
      quarantine: () =>
        new Quarantine({
          uploadsDir: uploadsDir(resolve(cfg.buffer.spool_dir)),
          capBytes: resolveSpoolBudget(cfg, env).quarantineBytesCap,
          metrics,
          log,
        }),
      metrics,
      log,
    });
    return { store: createFileStore(destination, { publish: true, journal: new PartialJournal(dir, log) }) };
  }

  const backend = await openObjectBackend(cfg, env, log);
  const budget = resolveSpoolBudget(cfg, env);
  const spoolDir = cfg.buffer.spool_dir;
  // Kafka with acknowledgements reads a staged file's records again from the committed offset; any other source
  // has let them go, so what a previous process staged completely is uploaded now.
  const recovered = await recoverStaging({
    spoolDir,
    mode: cfg.offsetsHeld ? "remove" : "upload",
    backend,
    quarantineBytesCap: budget.quarantineBytesCap,
    metrics,
    log,
  });
  const free = await checkSpoolFree({
    spoolDir,
    minFreeSpoolBytes: budget.minFreeSpoolBytes,
    toUpload: recovered.toUpload.length,
  });
  if (free.warning) log.warn(free.warning);
  log.info(
    {
      spoolDir,
      stagedBytesCap: budget.stagedBytesCap,
      minFreeSpoolBytes: budget.minFreeSpoolBytes,
      quarantineBytesCap: budget.quarantineBytesCap,
      declaredLimit: budget.declaredPath,
      removed: recovered.removed,
      recovered: recovered.toUpload.length,
      quarantined: recovered.quarantined,
    },
    "staging ready",
  );
  const staging = createStagingStore({
    backend,
    spoolDir,
    recoverable: !cfg.offsetsHeld,
    writerParallelism: cfg.buffer.writer_parallelism,
    stagedBytesCap: budget.stagedBytesCap,
    quarantineBytesCap: budget.quarantineBytesCap,
    metrics,
    log,
  });
  for (const m of recovered.toUpload) {
    staging.enqueueRecovered(m).catch((err: unknown) => log.error({ err, key: m.key }, "recovered file not uploaded"));
  }
  return { store: staging, staging };
}
