// Chaos on transport: grpc. Two listener replicas, each a pod that comes back on its own spool and port, take pushes
// from a sender at a steady rate while a seeded schedule kills them (SIGKILL) and stops them (SIGTERM, a drain); grpc
// has no replay, so no other fault applies. The sender pushes each record once and keeps what each push was answered.
// At the end: every push a replica answered OK is in the archive, in its destination, unless that replica was killed
// before its file was complete (the archive copy is at-most-once there: the seed's Inbound transport), and then only
// what it answered in the last roll interval before the kill; pushes the sender saw fail are counted, by code, with
// how many of their records landed anyway. The schedule is the Kafka chaos test's, kills and stops only, and
// DFE_ARCHIVER_CHAOS_SEED replays it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { status, type ServiceError } from "@grpc/grpc-js";
import { minioArchive, minioBucket, need, s3Client } from "../support/testbed.ts";
import { filesUnder, freePort, linesOf, readBucket, startArchiver, tempDir } from "../support/archiver.ts";
import { random } from "../support/random.ts";
import { connectPush, pushWithRetry, type PushClient } from "../../runtime/src/transport/push-client.ts";
import type { Incarnation } from "./incarnation.ts";
import { describe, schedule } from "./schedule.ts";

const SEED = Number(process.env["DFE_ARCHIVER_CHAOS_SEED"] ?? Math.floor(Math.random() * 2 ** 31));
const WINDOW_MS = 60_000;
const REPLICAS = 2;
/** Records a push, and pushes a second per replica. */
const PER_PUSH = 40;
const PUSHES_PER_S = 5;
const DESTINATIONS = 50;
const ROLL_S = 5;
const FLUSH_AGE_S = 1;
/**
 * What a SIGKILL may take of what was answered: a file still open (up to a roll interval, rolled at the next tick),
 * what the hot buffers held (up to flush_age), and the queue, with a margin for a loaded machine. A complete file is
 * uploaded by the restart.
 */
const LOSS_WINDOW_MS = (ROLL_S + 1 + FLUSH_AGE_S + 3) * 1000;

interface Replica {
  readonly name: string;
  readonly dir: string;
  readonly port: number;
  readonly client: PushClient;
  current?: Incarnation;
}

/** One push as the sender saw it. */
interface Push {
  readonly first: number;
  readonly replica: Replica;
  /** The incarnation that answered OK, and when. */
  answeredBy?: Incarnation;
  answeredAt?: number;
  /** The code of the error the sender saw instead. */
  failed?: status;
}

test(`chaos on grpc: ${REPLICAS} listener replicas killed and stopped, every answered push accounted for`, async (t) => {
  const started = Date.now();
  const faults = schedule(SEED, WINDOW_MS, REPLICAS, false).filter((f) => f.kind === "sigkill" || f.kind === "sigterm");
  const plan = `seed=${SEED} window=${WINDOW_MS / 1000}s (replay: DFE_ARCHIVER_CHAOS_SEED=${SEED})`;
  t.diagnostic(`${plan}\n${faults.map(describe).join("\n")}`);
  console.log(`${plan}\n${faults.map(describe).join("\n")}`);

  const endpoint = need("TESTBED_MINIO_ENDPOINT");
  const bucket = await minioBucket(t);
  const incarnations: Incarnation[] = [];
  const replicas: Replica[] = [];
  for (let i = 0; i < REPLICAS; i++) {
    const port = await freePort();
    // Reconnect within a second of a restart: grpc-js backs off up to 2 minutes by default.
    const client = connectPush(`127.0.0.1:${port}`, undefined, {
      "grpc.initial_reconnect_backoff_ms": 200,
      "grpc.max_reconnect_backoff_ms": 1000,
    });
    t.after(() => client.close());
    replicas.push({ name: `g${i}`, dir: tempDir(t, `chaos-grpc-g${i}-`), port, client });
  }
  const start = async (r: Replica): Promise<Incarnation> => {
    const run = await startArchiver(
      t,
      {
        transport: "grpc",
        grpc: { listen: `127.0.0.1:${r.port}` },
        archive: { ...minioArchive(bucket, "a", endpoint), roll_interval_secs: ROLL_S },
        buffer: { spool_dir: join(r.dir, "spool"), flush_age_secs: FLUSH_AGE_S },
        logger: { level: "info" },
      },
      { dir: r.dir },
    );
    const inc: Incarnation = { name: `${r.name}#${incarnations.length}`, run };
    void run.exited.then((code) => (inc.exit = code));
    incarnations.push(inc);
    r.current = inc;
    return inc;
  };
  const stop = async (r: Replica, signal: NodeJS.Signals): Promise<number | string | undefined> => {
    const inc = r.current;
    if (inc === undefined || inc.exit !== undefined) return undefined;
    r.current = undefined;
    inc.signal = signal;
    inc.signalAt = Date.now();
    return inc.run.stop(signal);
  };
  for (const r of replicas) await start(r);

  // ---- the sender: each replica a push every 1/PUSHES_PER_S s, each record pushed once ----
  const pushes: Push[] = [];
  let next = 0;
  let sending = true;
  const rnd = random(SEED ^ 0x97c);
  const lane = async (r: Replica) => {
    while (sending) {
      const first = next;
      next += PER_PUSH;
      const push: Push = { first, replica: r };
      pushes.push(push);
      const records = Array.from({ length: PER_PUSH }, (_, k) => {
        const value = { id: first + k, _source: "chaos", _org_id: `org-${Math.floor(rnd() * DESTINATIONS)}` };
        return { payload: Buffer.from(JSON.stringify(value)), routing_key: "" };
      });
      // Who answered: the incarnation running as the push went out (one signalled since still answers what it read),
      // or with none running then, the one started meanwhile.
      const before = r.current;
      try {
        await pushWithRetry(r.client, { records });
        push.answeredBy = before ?? r.current;
        push.answeredAt = Date.now();
      } catch (err) {
        push.failed = (err as ServiceError).code;
      }
      await sleep(1000 / PUSHES_PER_S);
    }
  };
  const lanes = Promise.all(replicas.map(lane));

  // ---- the faults ----
  const faultErrors: string[] = [];
  const background: Promise<unknown>[] = [];
  const windowStart = Date.now();
  for (const f of faults) {
    const wait = windowStart + f.at - Date.now();
    if (wait > 0) await sleep(wait);
    if (f.kind !== "sigkill" && f.kind !== "sigterm") continue;
    // The scheduled replica, or the next one up: one still coming back from an earlier fault is left to it. With none
    // up, the first back takes it: skipped instead, seed 1873380519's two SIGTERMs both fell while both replicas were
    // restarting from SIGKILLs, and the run stopped nothing.
    const up = () => [...replicas.slice(f.replica % REPLICAS), ...replicas].find((c) => c.current !== undefined);
    let r = up();
    while (r === undefined && Date.now() < windowStart + WINDOW_MS) {
      await sleep(100);
      r = up();
    }
    if (r === undefined) continue;
    background.push(
      (async () => {
        const code = await stop(r, f.kind === "sigkill" ? "SIGKILL" : "SIGTERM");
        if (f.kind === "sigterm" && code !== undefined && code !== 0) faultErrors.push(`${describe(f)}: exit ${code}`);
        await sleep(f.restartMs);
        await start(r);
      })().catch((err: unknown) => faultErrors.push(`${describe(f)}: ${String(err)}`)),
    );
  }
  await sleep(Math.max(0, windowStart + WINDOW_MS - Date.now()));
  sending = false;
  await lanes;
  await Promise.all(background);
  for (const r of replicas) {
    const inc = r.current;
    const code = await stop(r, "SIGTERM");
    assert.equal(code, 0, `${r.name} drains and exits 0:\n${inc?.run.output().slice(-3_000) ?? ""}`);
  }

  // ---- the account ----
  const crashed = incarnations.filter((i) => i.signal === undefined);
  assert.deepEqual(
    crashed.map((i) => `${i.name} exited ${String(i.exit)}`),
    [],
    "no process exited on its own",
  );
  const s3 = s3Client(endpoint);
  t.after(() => s3.destroy());
  const objects = await readBucket(s3, bucket, tempDir(t));
  const archived = new Map<number, number>();
  let misrouted = 0;
  for (const o of objects) {
    const dest = o.key.split("/").slice(1, 3).join("/");
    for (const l of linesOf(o.content)) {
      const v = JSON.parse(l) as { id: number; _source: string; _org_id: string };
      if (dest !== `${v._source}/${v._org_id}`) misrouted++;
      archived.set(v.id, (archived.get(v.id) ?? 0) + 1);
    }
  }
  const landed = (p: Push) => {
    let n = 0;
    for (let id = p.first; id < p.first + PER_PUSH; id++) if (archived.has(id)) n++;
    return n;
  };
  const answered = pushes.filter((p) => p.answeredAt !== undefined);
  const failed = pushes.filter((p) => p.failed !== undefined);
  // An answered push not all in the archive: only a SIGKILL of the replica that answered it, soon after, excuses it.
  const lostToKill: Push[] = [];
  const lostOtherwise: string[] = [];
  for (const p of answered) {
    if (landed(p) === PER_PUSH) continue;
    const by = p.answeredBy;
    const at = (ms: number) => `+${((ms - windowStart) / 1000).toFixed(1)} s`;
    if (by?.signal === "SIGKILL" && by.signalAt !== undefined && (p.answeredAt ?? 0) >= by.signalAt - LOSS_WINDOW_MS)
      lostToKill.push(p);
    else
      lostOtherwise.push(
        `push of ids ${p.first}.. answered by ${by?.name ?? "?"} at ${at(p.answeredAt ?? 0)}` +
          ` (${by?.signal ?? "running"}${by?.signalAt === undefined ? "" : ` at ${at(by.signalAt)}`})`,
      );
  }
  const failedByCode = new Map<string, { pushes: number; landed: number }>();
  for (const p of failed) {
    const code = status[p.failed ?? status.UNKNOWN] ?? String(p.failed);
    const entry = failedByCode.get(code) ?? { pushes: 0, landed: 0 };
    entry.pushes++;
    entry.landed += landed(p);
    failedByCode.set(code, entry);
  }
  const duplicated = [...archived.values()].reduce((n, c) => n + c - 1, 0);
  const quarantined = replicas.reduce(
    (n, r) => n + filesUnder(join(r.dir, "spool/uploads")).filter((f) => f.includes("/quarantine/")).length,
    0,
  );
  const kills = incarnations.filter((i) => i.signal === "SIGKILL").length;
  const stops = incarnations.filter((i) => i.signal === "SIGTERM").length - REPLICAS;
  const table = [
    ["seed", String(SEED)],
    ["wall time", `${((Date.now() - started) / 1000).toFixed(0)} s`],
    ["pushes sent", `${pushes.length} (${next} records)`],
    ["answered OK", `${answered.length} pushes (${answered.length * PER_PUSH} records)`],
    [
      "answered, lost to a SIGKILL (at-most-once)",
      `${lostToKill.length} pushes, ${lostToKill.reduce((n, p) => n + PER_PUSH - landed(p), 0)} records`,
    ],
    [
      "failed as the sender saw them (records that landed anyway)",
      [...failedByCode].map(([c, e]) => `${c} ${e.pushes} (${e.landed})`).join(", ") || "none",
    ],
    ["archived (distinct / lines / objects)", `${archived.size} / ${archived.size + duplicated} / ${objects.length}`],
    ["answered, not in the archive otherwise", String(lostOtherwise.length)],
    ["duplicated", String(duplicated)],
    ["quarantined files (incomplete at a kill)", String(quarantined)],
    ["faults", `sigkill ${kills}, sigterm ${stops}`],
  ];
  const text = `${plan}\n${table.map(([k, v]) => `| ${k} | ${v} |`).join("\n")}`;
  t.diagnostic(text);
  console.log(text);

  assert.deepEqual(faultErrors, [], "every fault ran to its end, every SIGTERM exited 0");
  assert.ok(kills >= 1 && stops >= 1, "the faults ran");
  assert.ok(answered.length > pushes.length / 2, "most pushes were answered");
  assert.deepEqual(lostOtherwise.slice(0, 10), [], `${lostOtherwise.length} answered pushes not in the archive`);
  assert.equal(misrouted, 0, "every record in its own destination");
  assert.equal(duplicated, 0, "a record pushed once is archived once");
});
