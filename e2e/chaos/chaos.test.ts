// Chaos: three runtime replicas in one consumer group under a seeded schedule of faults together -- SIGKILL, SIGTERM,
// rebalance storms, a broker restart, MinIO outages, a full spool -- while a producer writes at a steady rate to a few
// hundred destinations. At the end every record on the topic is in the archive, in its destination; each duplicate is
// traced to the ownership change that read it again, and none follows a SIGTERM or a revocation that no fault kept
// from handing its partitions over committed; offsets are committed to the end; no process exited on its own.
// The Kafka and the MinIO are the test's own (the testbed's jars and binary): restarting the shared ones would break
// the tests other people run. The default size runs in about 3 minutes; DFE_ARCHIVER_SOAK_S=1800 npm run soak runs a
// 30-minute window. DFE_ARCHIVER_CHAOS_SEED replays a schedule (see FOUND_DEFECT_SEED for the default).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { kafka, minioArchive, privateKafka, privateMinio, s3Client, uniqueName } from "../support/testbed.ts";
import {
  fillUntil,
  filesUnder,
  groupOffsets,
  linesOf,
  readBucket,
  readTopicRecords,
  startArchiver,
  tempDir,
  tmpfsDir,
  waitCommittedToEnd,
  waitFor,
} from "../support/archiver.ts";
import { random } from "../support/random.ts";
import { UPLOAD_DRAIN_MS } from "../../runtime/src/store/staging.ts";
import type { Incarnation as Run } from "./incarnation.ts";
import { FAULT_KINDS, describe, schedule, type Fault, type FaultKind } from "./schedule.ts";

const SOAK_S = Number(process.env["DFE_ARCHIVER_SOAK_S"] ?? "0");
const SOAK = SOAK_S > 0;
const WINDOW_MS = (SOAK ? SOAK_S : 90) * 1000;
/**
 * The schedule npm test runs: 2024 found a defect. A storm replica caught up on 45 s of backlog after a broker restart,
 * and a rebalance 1.2 s later revoked partitions whose ~200 files it could not upload within a hand-over bound of 8 s
 * (the session less two heartbeats); their next owners read 3,852 records again. Its kills mid hand-over also exercise
 * the account. The soak, and DFE_ARCHIVER_CHAOS_SEED=random, draw a seed.
 */
const FOUND_DEFECT_SEED = 2024;
const SEED_ENV = process.env["DFE_ARCHIVER_CHAOS_SEED"] ?? (SOAK ? "random" : String(FOUND_DEFECT_SEED));
const SEED = SEED_ENV === "random" ? Math.floor(Math.random() * 2 ** 31) : Number(SEED_ENV);
if (!Number.isInteger(SEED)) throw new Error(`DFE_ARCHIVER_CHAOS_SEED is "${SEED_ENV}": set an integer, or random`);
/** Only these kinds of the schedule run (comma-separated), to replay one kind alone. */
const KINDS = process.env["DFE_ARCHIVER_CHAOS_KINDS"]?.split(",");
/** A directory each process's output is written to at the end, for the evidence behind a duplicate. */
const LOGS = process.env["DFE_ARCHIVER_CHAOS_LOGS"];
const REPLICAS = 3;
const PARTITIONS = 12;
const DESTINATIONS = SOAK ? 300 : 200;
const RATE = 300; // records a second
const SESSION_TIMEOUT_MS = 10_000;
/**
 * A revocation's hand-over bound: the rebalance timeout (kafka.rebalance_timeout_ms, 60 s by default) less two
 * heartbeat intervals (a second each at this session).
 */
const HANDOVER_MS = 60_000 - 2_000;
/** The drain's last commit is retried this long after its uploads' grace (pipeline.ts DRAIN_COMMIT_MS). */
const DRAIN_COMMIT_MS = 10_000;

/** A fault as it ran: when it began and, for one that lasts (an outage, a full spool), when it ended. */
interface FaultEvent {
  readonly at: number;
  readonly kind: FaultKind;
  readonly target?: string | undefined;
  end?: number;
}

/** One run of a replica's process. */
interface Incarnation extends Run {
  /** Its last /metrics text. */
  metrics: string;
}

/** A replica: a pod whose container restarts on the same spool. */
interface Replica {
  readonly name: string;
  readonly dir: string;
  readonly spool: string;
  /** The spool's own tmpfs (base replicas), which a spool-full fault fills. */
  readonly mount?: string;
  current?: Incarnation;
  /** Set while a spool-full fault holds the spool: a restart waits for it, as the startup check would refuse. */
  filled?: Promise<void>;
}

test(
  `chaos: ${REPLICAS} replicas, ${PARTITIONS} partitions, kills, rebalances, broker restart, MinIO outages, full spool`,
  // The account after the window reads every object back: tens of thousands after a long soak.
  { timeout: WINDOW_MS + 1_800_000 },
  async (t) => {
    const started = Date.now();
    const faults = schedule(SEED, WINDOW_MS, REPLICAS, SOAK).filter((f) => KINDS?.includes(f.kind) ?? true);
    const replay = [
      `DFE_ARCHIVER_CHAOS_SEED=${SEED}`,
      ...(SOAK ? [`DFE_ARCHIVER_SOAK_S=${SOAK_S}`] : []),
      ...(KINDS ? [`DFE_ARCHIVER_CHAOS_KINDS=${KINDS.join(",")}`] : []),
    ];
    const plan = `seed=${SEED} window=${WINDOW_MS / 1000}s (replay: ${replay.join(" ")})`;
    t.diagnostic(`${plan}\n${faults.map(describe).join("\n")}`);
    console.log(`${plan}\n${faults.map(describe).join("\n")}`);

    const broker = await privateKafka(t);
    // The helpers (topics, offsets, the topic read back) go to this test's broker.
    process.env["TESTBED_KAFKA_BROKERS"] = broker.brokers;
    const minio = await privateMinio(t);
    const s3 = s3Client(minio.endpoint);
    t.after(() => s3.destroy());
    const bucket = uniqueName("chaos");
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    // Not kafkaTopic: the broker goes with the test, and with it the topic.
    const topic = uniqueName("chaos");
    const admin = kafka().admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
    await admin.disconnect();
    const groupId = uniqueName("g");
    const config = (spool: string) => ({
      kafka: {
        brokers: [broker.brokers],
        group_id: groupId,
        topics: [topic],
        session_timeout_ms: SESSION_TIMEOUT_MS,
      },
      archive: { ...minioArchive(bucket, "a", minio.endpoint), roll_interval_secs: SOAK ? 30 : 20 },
      // A revocation's hand-over uploads a file per destination within 8 s (the session less two heartbeats).
      buffer: { spool_dir: spool, flush_age_secs: 2, min_free_spool_bytes: 1 << 20, writer_parallelism: 8 },
      routing: { mode: "expression", expression_fields: ["_org_id"] },
      dlq: { enabled: false },
      // info: the partitions each process was assigned, by which every duplicate is traced.
      logger: { level: "info" },
    });

    const incarnations: Incarnation[] = [];
    const replica = (name: string, tmpfs: boolean): Replica => {
      const dir = tempDir(t, `chaos-${name}-`);
      const mount = tmpfs ? tmpfsDir(t, "64m", `chaos-spool-${name}-`) : undefined;
      const spool = join(mount ?? dir, "spool");
      mkdirSync(spool);
      return { name, dir, spool, mount };
    };
    const start = async (r: Replica, waitReady: boolean): Promise<Incarnation> => {
      await r.filled;
      const run = await startArchiver(t, config(r.spool), { dir: r.dir, waitReady });
      const inc: Incarnation = { name: `${r.name}#${incarnations.length}`, run, metrics: "" };
      void run.exited.then((code) => {
        inc.exit = code;
        inc.exitAt = Date.now();
      });
      incarnations.push(inc);
      r.current = inc;
      return inc;
    };
    const ready = (inc: Incarnation) =>
      fetch(`http://${inc.run.metricsAddr}/readyz`).then(
        (res) => res.ok,
        () => false,
      );
    const scrape = async (inc: Incarnation) => {
      const text = await fetch(`http://${inc.run.metricsAddr}/metrics`).then(
        (res) => res.text(),
        () => undefined,
      );
      if (text !== undefined && inc.exit === undefined) inc.metrics = text;
    };
    const stop = async (r: Replica, signal: NodeJS.Signals): Promise<number | string | undefined> => {
      const inc = r.current;
      if (inc === undefined || inc.exit !== undefined) return undefined;
      r.current = undefined;
      await scrape(inc);
      inc.signal = signal;
      inc.signalAt = Date.now();
      return inc.run.stop(signal);
    };

    const base = Array.from({ length: REPLICAS }, (_, i) => replica(`r${i}`, true));
    for (const r of base) await start(r, true);
    const scraping = setInterval(() => {
      for (const inc of incarnations) if (inc.exit === undefined) void scrape(inc);
    }, 2_000);
    t.after(() => clearInterval(scraping));

    // ---- the producer: RATE records a second, each with an id of its own, to a seeded partition and destination ----
    const acked = new Set<number>();
    let producing = true;
    t.after(() => (producing = false));
    /** Failed sends, by error message. */
    const sendErrors = new Map<string, number>();
    const producer = (async () => {
      const rnd = random(SEED ^ 0x5eed);
      const connected = async () => {
        for (;;) {
          const fresh = kafka("chaos-producer").producer({ idempotent: true, maxInFlightRequests: 1 });
          try {
            await fresh.connect();
            return fresh;
          } catch {
            if (!producing) return fresh;
            await sleep(500);
          }
        }
      };
      let p = await connected();
      let next = 0;
      let unsent: { id: number; partition: number; value: string }[] = [];
      const from = Date.now();
      while (producing) {
        const due = Math.floor(((Date.now() - from) / 1000) * RATE);
        for (; next < due && unsent.length < 5_000; next++) {
          const value = { id: next, _org_id: `org-${Math.floor(rnd() * DESTINATIONS)}`, at: Date.now() };
          unsent.push({ id: next, partition: Math.floor(rnd() * PARTITIONS), value: JSON.stringify(value) });
        }
        if (unsent.length > 0) {
          const batch = unsent;
          try {
            await p.send({
              topic,
              acks: -1,
              timeout: 5_000,
              messages: batch.map((m) => ({ partition: m.partition, value: m.value })),
            });
            for (const m of batch) acked.add(m.id);
            unsent = [];
          } catch (err) {
            // The broker is away, or it came back and the producer fails every send since (a soak's sent nothing
            // after its first broker restart): the same records again, from a new producer (one may land twice; the
            // topic read back says).
            const why = (err as Error).message;
            sendErrors.set(why, (sendErrors.get(why) ?? 0) + 1);
            await p.disconnect().catch(() => undefined);
            await sleep(500);
            p = await connected();
          }
        }
        await sleep(100);
      }
      await p.disconnect();
      return next;
    })();

    // ---- the faults ----
    const injected: Record<FaultKind, number> = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<
      FaultKind,
      number
    >;
    const events: FaultEvent[] = [];
    const background: Promise<unknown>[] = [];
    const faultErrors: string[] = [];
    let stormSeq = 0;
    const stormReplicas: Replica[] = [];
    const alive = (i: number): Replica | undefined => {
      for (let k = 0; k < REPLICAS; k++) {
        const r = base[(i + k) % REPLICAS];
        if (r?.current !== undefined) return r;
      }
      return undefined;
    };
    const inject = async (f: Fault): Promise<void> => {
      switch (f.kind) {
        case "sigkill":
        case "sigterm": {
          const r = alive(f.replica);
          if (r === undefined) return;
          const target = r.current?.name;
          const signal = f.kind === "sigkill" ? "SIGKILL" : "SIGTERM";
          events.push({ at: Date.now(), kind: f.kind, target });
          injected[f.kind]++;
          await stop(r, signal);
          await sleep(f.restartMs);
          await start(r, false);
          return;
        }
        case "storm": {
          injected.storm++;
          const joined: Promise<unknown>[] = [];
          for (let i = 0; i < f.joins; i++) {
            const r = replica(`s${stormSeq++}`, false);
            stormReplicas.push(r);
            events.push({ at: Date.now(), kind: "storm", target: r.name });
            // It leaves once it has joined (ready: assigned and reading), or after a minute if a broker restart or
            // a loaded machine holds it up; a process still starting when SIGTERM comes exits on the signal.
            joined.push(
              start(r, false).then(async (inc) => {
                await waitFor(
                  async () => inc.exit !== undefined || (await ready(inc)),
                  60_000,
                  () => "",
                ).catch(() => undefined);
                await sleep(1_000);
                await stop(r, "SIGTERM");
              }),
            );
            await sleep(f.gapMs);
          }
          await Promise.all(joined);
          return;
        }
        case "broker-restart":
        case "minio-outage": {
          const server = f.kind === "broker-restart" ? broker : minio;
          injected[f.kind]++;
          const event: FaultEvent = { at: Date.now(), kind: f.kind };
          events.push(event);
          await server.stop();
          await sleep(f.downMs);
          await server.start();
          event.end = Date.now();
          return;
        }
        case "spool-full": {
          const r = base[f.replica];
          if (r?.mount === undefined) return;
          injected[f.kind]++;
          const event: FaultEvent = { at: Date.now(), kind: f.kind, target: r.current?.name };
          events.push(event);
          const filler = join(r.mount, "filler");
          const held = (async () => {
            fillUntil(filler, r.mount ?? "", 256 << 10);
            await sleep(f.holdMs);
            rmSync(filler);
            event.end = Date.now();
          })();
          r.filled = held;
          await held;
          r.filled = undefined;
          return;
        }
      }
    };
    const windowStart = Date.now();
    for (const f of faults) {
      const wait = windowStart + f.at - Date.now();
      if (wait > 0) await sleep(wait);
      // A fault that fails (a broker that does not come back) fails the test at the end, after the account.
      background.push(inject(f).catch((err: unknown) => faultErrors.push(`${describe(f)}: ${String(err)}`)));
    }
    await sleep(Math.max(0, windowStart + WINDOW_MS - Date.now()));
    producing = false;
    const sent = await producer;
    await Promise.all(background);
    const faultsDone = Date.now();

    // ---- settle: every base replica up, the store and the broker back, offsets committed to the end ----
    for (const r of base) if (r.current === undefined) await start(r, false);
    const tail = () =>
      incarnations
        .filter((i) => i.exit === undefined)
        .map((i) => `--- ${i.name}\n${i.run.output().slice(-2_000)}`)
        .join("\n");
    await waitCommittedToEnd(groupId, topic, 300_000, () => `offsets not committed to the end:\n${tail()}`);
    const settled = Date.now();
    for (const r of base) {
      const inc = r.current;
      const code = await stop(r, "SIGTERM");
      assert.equal(code, 0, `${r.name} drains and exits 0:\n${inc?.run.output().slice(-3_000) ?? ""}`);
    }
    clearInterval(scraping);
    const { committed, end } = await groupOffsets(groupId, topic);

    // ---- the account ----
    const crashed = incarnations.filter((i) => i.signal === undefined);
    assert.deepEqual(
      crashed.map((i) => `${i.name} exited ${String(i.exit)}`),
      [],
      `a process exited on its own:\n${crashed.map((i) => `--- ${i.name}\n${i.run.output().slice(-3_000)}`).join("\n")}`,
    );
    // A storm replica told to leave while still starting (no handler yet) ends on the signal itself.
    const termExits = incarnations.filter((i) => i.signal === "SIGTERM" && i.exit !== 0 && i.exit !== "SIGTERM");
    const leftStarting = incarnations.filter((i) => i.signal === "SIGTERM" && i.exit === "SIGTERM").length;
    const inTopic = await readTopicRecords(
      topic,
      Object.values(end).reduce((a, b) => a + b, 0),
      120_000,
    );
    const onTopic = new Map<number, { count: number; partition: number; offset: number; at: number }>();
    for (const r of inTopic) {
      const v = JSON.parse(r.value.toString()) as { id: number; at: number };
      const seen = onTopic.get(v.id);
      if (seen) seen.count++;
      else onTopic.set(v.id, { count: 1, partition: r.partition, offset: r.offset, at: v.at });
    }
    const lostByBroker = [...acked].filter((id) => !onTopic.has(id)).length;

    const dir = tempDir(t);
    const objects = await readBucket(s3, bucket, dir);
    // Each copy of a record, by the process that wrote it (its instance id ends the object's name).
    const writers = new Map(incarnations.flatMap((inc) => instancesOf(inc).map((id) => [id, inc] as const)));
    const archived = new Map<number, number>();
    const copies = new Map<number, (Incarnation | undefined)[]>();
    let misrouted = 0;
    let lines = 0;
    for (const o of objects) {
      const dest = o.key.split("/")[2];
      const writer = writers.get(/-([0-9a-f]+)_\d+\.jsonl\.zst$/.exec(o.key)?.[1] ?? "");
      for (const l of linesOf(o.content)) {
        const v = JSON.parse(l) as { id: number; _org_id: string };
        lines++;
        if (v._org_id !== dest) misrouted++;
        archived.set(v.id, (archived.get(v.id) ?? 0) + 1);
        const list = copies.get(v.id);
        if (list === undefined) copies.set(v.id, [writer]);
        else list.push(writer);
      }
    }
    const missing = [...onTopic.keys()].filter((id) => !archived.has(id));

    // Each duplicate is read again by the partition's next owner: its cause is how the first process that archived it
    // lost the partition.
    const owned = ownership(incarnations);
    const causes = new Map<string, number>();
    const evidence: string[] = [];
    let duplicated = 0;
    for (const [id, n] of archived) {
      const rec = onTopic.get(id);
      const extra = n - (rec?.count ?? 0);
      if (rec === undefined || extra <= 0) continue;
      duplicated += extra;
      const cause = duplicateCause(rec, copies.get(id) ?? [], owned, events);
      causes.set(cause, (causes.get(cause) ?? 0) + extra);
      if (evidence.filter((e) => e.startsWith(cause)).length < 3)
        evidence.push(`${cause}: id ${id} partition ${rec.partition} offset ${rec.offset}`);
    }

    // Nothing left staged or quarantined: the base replicas drained with the store up; a storm replica that left
    // during an outage keeps its staged files (no pod comes back for them) and the next owner read their records again.
    const left = (spool: string, quarantine: boolean) =>
      filesUnder(join(spool, "uploads")).filter((f) => f.includes("/quarantine/") === quarantine).length;
    const storms = incarnations.filter((i) => i.name.startsWith("s"));
    const stagedLeft = base.reduce((n, r) => n + left(r.spool, false), 0);
    const stormStaged = stormReplicas.reduce((n, r) => n + left(r.spool, false), 0);
    const quarantined = [...base, ...stormReplicas].reduce((n, r) => n + left(r.spool, true), 0);
    const dropped = new Map<string, number>();
    let deadLettered = 0;
    let revokeDiscarded = 0;
    const handOvers = { done: 0, cut_short: 0 };
    for (const inc of incarnations) {
      for (const m of inc.metrics.matchAll(/^messages_dropped_total\{reason="([^"]*)"\} (\S+)$/gm))
        dropped.set(m[1] ?? "", (dropped.get(m[1] ?? "") ?? 0) + Number(m[2]));
      deadLettered += metricValue(inc.metrics, "messages_dlq_total");
      revokeDiscarded += metricValue(inc.metrics, "transport_revoke_discarded_total");
      for (const m of inc.metrics.matchAll(/^transport_handovers_total\{outcome="(done|cut_short)"\} (\S+)$/gm))
        handOvers[m[1] as keyof typeof handOvers] += Number(m[2]);
    }

    const table = [
      ["seed", String(SEED)],
      [
        "wall time",
        `${((Date.now() - started) / 1000).toFixed(0)} s (faults ${((faultsDone - windowStart) / 1000).toFixed(0)} s, settle ${((settled - faultsDone) / 1000).toFixed(0)} s)`,
      ],
      [
        "produced (on the topic)",
        `${onTopic.size} (${sent} sent, ${acked.size} acknowledged, ${inTopic.length - onTopic.size} written twice by producer retries)`,
      ],
      ["failed sends (the producer's view)", [...sendErrors].map(([why, n]) => `${n}x ${why}`).join("; ") || "none"],
      ["archived (distinct)", `${onTopic.size - missing.length} in ${lines} lines, ${objects.length} objects`],
      ["duplicated", `${duplicated} (${[...causes].map(([c, n]) => `${c} ${n}`).join(", ") || "none"})`],
      ["dead-lettered", String(deadLettered)],
      ["dropped by reason", [...dropped].map(([r, n]) => `${r} ${n}`).join(", ") || "none"],
      ["revocations handed over (done / cut short at the bound)", `${handOvers.done} / ${handOvers.cut_short}`],
      ["discarded at revoke (read again by the next owner)", String(revokeDiscarded)],
      ["faults injected", FAULT_KINDS.map((k) => `${k} ${injected[k]}`).join(", ")],
      [
        "processes",
        `${incarnations.length} (storm replicas ${storms.length}, ${leftStarting} stopped while starting); SIGTERM exits not 0: ${termExits.map((i) => `${i.name}=${String(i.exit)}`).join(" ") || "none"}`,
      ],
      [
        "staged / quarantined files left",
        `${stagedLeft} / ${quarantined} (and ${stormStaged} staged in the spools of storm replicas that left, their records read again by the next owner)`,
      ],
    ];
    const text = `${plan}\n${table.map(([k, v]) => `| ${k} | ${v} |`).join("\n")}\n${evidence.join("\n")}`;
    t.diagnostic(text);
    console.log(text);
    if (LOGS !== undefined) {
      mkdirSync(LOGS, { recursive: true });
      for (const inc of incarnations) writeFileSync(join(LOGS, `${inc.name}.log`), inc.run.output());
      writeFileSync(join(LOGS, "faults.json"), JSON.stringify({ windowStart, events }, null, 1));
    }

    assert.deepEqual(faultErrors, [], "every fault ran to its end");
    assert.equal(lostByBroker, 0, "every acknowledged record is on the topic");
    assert.deepEqual(missing.slice(0, 20), [], `${missing.length} records on the topic are not in the archive`);
    assert.equal(misrouted, 0, "every record is in its own destination");
    assert.deepEqual(committed, end, "offsets committed to the end");
    assert.equal(causes.get("no ownership change") ?? 0, 0, "a record archived twice without being read twice");
    assert.equal(causes.get("no hold of an archiving process") ?? 0, 0, "every copy traced to its writer's hold");
    // A clean SIGTERM or revocation hands its partitions over committed: nothing it archived is read again.
    const clean = [...causes].filter(([c]) => c.includes("a clean"));
    assert.deepEqual(clean, [], `duplicates after a clean hand-over:\n${evidence.join("\n")}`);
    assert.equal(stagedLeft, 0, "the base replicas drained every staged file");
    assert.equal(quarantined, 0, "nothing quarantined");
    assert.equal(
      [...dropped.values()].reduce((a, b) => a + b, 0),
      0,
      "nothing dropped",
    );
    assert.deepEqual(
      termExits.map((i) => i.name),
      [],
      "every SIGTERM drains to exit 0",
    );
    if (KINDS === undefined)
      assert.ok(injected.sigkill >= (SOAK ? 20 : 1) && injected["minio-outage"] >= (SOAK ? 5 : 1), "the faults ran");
  },
);

function metricValue(text: string, name: string): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "gm"))) sum += Number(m[1]);
  return sum;
}

/** The instance ids a process names its files with: its log says each as a pipeline starts (a restart in place too). */
function instancesOf(inc: Incarnation): string[] {
  return [...inc.run.output().matchAll(/"instanceId":"([0-9a-f]+)"/g)].map((m) => m[1] ?? "");
}

/**
 * A process's hold on a partition: from its assignment until a revocation (a rebalance's, handed over; or one a lost
 * membership found at its next join), its signal, or its exit, whichever came first (`end` undefined: held to the
 * end).
 */
interface Ownership {
  readonly owner: Incarnation;
  readonly start: number;
  end?: number;
  /** What ended it: a revocation, or the signal the test sent. */
  endedBy?: "revoke" | NodeJS.Signals;
  /** A revocation's hand-over, from its start to its outcome (none logged: the process ended first). */
  handOver?: "running" | "done" | "cut_short";
  /** When its outcome was logged. */
  handOverEnd?: number;
}

/** Per partition, every process's holds on it, by start, from the "partitions assigned" and "revoked" log lines. */
function ownership(incarnations: readonly Incarnation[]): Map<number, Ownership[]> {
  const out = new Map<number, Ownership[]>();
  for (const inc of incarnations) {
    const open = new Map<number, Ownership>();
    const end = (p: number, at: number, by: Ownership["endedBy"]) => {
      const o = open.get(p);
      if (o === undefined) return;
      o.end = at;
      o.endedBy = by;
      open.delete(p);
    };
    /** Per partition, its last hold ended by a revocation, until the hand-over's outcome is logged. */
    const handing = new Map<number, Ownership>();
    for (const line of inc.run.output().split("\n")) {
      const outcome = line.includes('"revoked partitions handed over: committed"')
        ? "done"
        : line.includes("hand-over cut short at its bound")
          ? "cut_short"
          : undefined;
      if (outcome !== undefined) {
        const e = JSON.parse(line) as { time: string; partitions: { partition: number }[] };
        for (const r of e.partitions) {
          const o = handing.get(r.partition);
          if (o === undefined) continue;
          o.handOver = outcome;
          o.handOverEnd = Date.parse(e.time);
          handing.delete(r.partition);
        }
        continue;
      }
      if (!line.includes('"partitions assigned"') && !line.includes('"partitions revoked')) continue;
      const e = JSON.parse(line) as {
        time: string;
        msg: string;
        assigned?: { partitions: number[] }[];
        revoked?: { partition: number }[];
      };
      const at = Date.parse(e.time);
      // A signalled process's revocations belong to its drain: the signal ended its hold.
      const by = inc.signalAt !== undefined && inc.signalAt <= at ? inc.signal : "revoke";
      for (const r of e.revoked ?? []) {
        const o = open.get(r.partition);
        end(r.partition, at, by);
        if (o !== undefined && e.msg.endsWith("handing them over")) {
          o.handOver = "running";
          handing.set(r.partition, o);
        }
      }
      for (const a of e.assigned ?? [])
        for (const p of a.partitions) {
          const o: Ownership = { owner: inc, start: at };
          open.set(p, o);
          const list = out.get(p) ?? [];
          list.push(o);
          out.set(p, list);
        }
    }
    // A drained process holds its partitions until it leaves the group, at its exit; a killed one, until the kill.
    const last = inc.signal === "SIGKILL" ? inc.signalAt : (inc.exitAt ?? inc.signalAt);
    if (last !== undefined) for (const p of [...open.keys()]) end(p, last, inc.signal);
  }
  for (const list of out.values()) list.sort((a, b) => a.start - b.start);
  return out;
}

/**
 * Why a record was archived twice: how the first process that archived it lost its partition -- killed, stopped
 * (SIGTERM: its drain), or left running and revoked in a rebalance (a storm's join or leave, a broker restart, a
 * session that timed out). A SIGTERM or a revocation hands the partition over having committed all it archived of
 * it, unless a fault kept that from landing within the hand-over's bound (see excuse): a duplicate after a clean one
 * is a defect.
 */
function duplicateCause(
  rec: { partition: number; at: number },
  writers: readonly (Incarnation | undefined)[],
  owned: Map<number, Ownership[]>,
  events: readonly FaultEvent[],
): string {
  const list = owned.get(rec.partition) ?? [];
  // The first hold of an archiving process that was still on when the record was produced, or began after.
  const first = list.find((o) => writers.includes(o.owner) && (o.end === undefined || o.end > rec.at));
  if (first === undefined) return "no hold of an archiving process";
  if (first.end === undefined) return "no ownership change";
  if (first.endedBy === "SIGKILL") return "re-read after SIGKILL";
  // Killed before its hand-over committed: the kill, not the revocation, left the partition uncommitted.
  if (first.handOver === "running" && first.owner.signal === "SIGKILL") return "re-read after SIGKILL mid hand-over";
  // A drain's hand-over runs from the signal, its uploads for UPLOAD_DRAIN_MS; a revocation's from the revocation
  // until its outcome (at most HANDOVER_MS; one a lost membership found at a join has none); the next owner takes the
  // partition once it has ended.
  const drain = first.endedBy === "SIGTERM";
  const from = drain ? (first.owner.signalAt ?? first.end) : first.end;
  const until = drain ? from + UPLOAD_DRAIN_MS : (first.handOverEnd ?? from + HANDOVER_MS);
  // One handed over committed everything it received: only a commit the broker lost in a restart is read again.
  const kinds: readonly FaultKind[] =
    first.handOver === "done" ? ["broker-restart"] : ["minio-outage", "spool-full", "broker-restart"];
  const during = excuse(first.owner, from, until, events, kinds);
  const what = drain ? "SIGTERM" : "revoke";
  return during === undefined ? `re-read after a clean ${what}` : `re-read after ${what} during ${during}`;
}

/**
 * A fault of `kinds` that can keep a hand-over begun at `from` from landing by `deadline`: the store (or the owner's
 * own spool) away during it, or the broker away at any point until its last commit. Only during: with the store back
 * as it began, a drain has 20 s for its uploads (a store back 0.6 s before a drain began once hid a drain that
 * committed nothing).
 */
function excuse(
  prev: Incarnation,
  from: number,
  deadline: number,
  events: readonly FaultEvent[],
  kinds: readonly FaultKind[],
): string | undefined {
  for (const e of events) {
    if (!kinds.includes(e.kind)) continue;
    const end = e.end ?? Infinity;
    const during = e.at <= deadline && end >= from;
    if (e.kind === "minio-outage" && during) return "a MinIO outage";
    if (e.kind === "spool-full" && e.target === prev.name && during) return "its spool full";
    // After a restart the coordinator loads and the sessions it cut short run out before commits land again.
    if (e.kind === "broker-restart" && e.at <= deadline + DRAIN_COMMIT_MS && end + SESSION_TIMEOUT_MS >= from)
      return "a broker restart";
  }
  return undefined;
}
