// Kafka consumer group through @platformatic/kafka: the library keeps the group membership (join, sync, heartbeats,
// rejoin on rebalance), while the fetch loop is ours. Its MessagesStream builds a message object per record and
// pauses only as a whole; this loop issues the Fetch requests itself (raw-fetch.ts), hands each partition's record
// batches to the sink as one batch, still encoded (decoded on a route lane, record-batch.ts), and fetches a partition
// again only once the sink resolved its batch (per-partition back-pressure).
// A subscription change tracks the new topics and joins again as the same member; the partitions it keeps are read on
// from where they were.
// A partition a rebalance revokes is handed over (see TransportSink.onRevoked): the library asks for the subscription's
// user data (protocolsMetadata) before each JoinGroup, and the revoke round's rejoin is held there until the sink has
// committed what it received of the partition, or the bound ran out. Until this member rejoins, the group hands the
// partition to no one, so its next owner reads from a committed offset that covers everything archived. The library
// sends no heartbeat while its rejoin waits, so the transport sends them meanwhile (#keepAlive).
import {
  Admin,
  COOPERATIVE_STICKY_ASSIGNOR,
  ConnectionPool,
  Consumer,
  FetchIsolationLevels,
  ListOffsetTimestamps,
  findErrorBy,
  heartbeatV4,
  type ClusterMetadata,
  type ConsumerGroupJoinPayload,
  type SASLOptions,
  type fetchV17,
} from "@platformatic/kafka";
import { once } from "node:events";
import type { ConnectionOptions } from "node:tls";
import { setTimeout as sleep } from "node:timers/promises";
import type { CommitOffset, PartitionRef } from "../delivery/tracker.ts";
import { ArchiverError } from "../errors.ts";
import type { TopicChange } from "./discovery.ts";
import { rawFetch, type RawFetchResponse } from "./raw-fetch.ts";
import { wholeBatches } from "./record-batch.ts";
import { TopicSubscription } from "./subscription.ts";
import type { EncodedBatch } from "../records.ts";
import { groupByTopic, type KafkaTransportOptions, type Transport, type TransportSink } from "./types.ts";

type FetchRequestTopic = fetchV17.FetchRequestTopic;

// A fetch the broker holds open delays the drain and a partition that became ready meanwhile: keep it short.
const MAX_WAIT_MS = 500;
const BUSY_WAIT_MS = 20;
/** Pause before fetching again after a failed fetch, offset lookup or sink batch. */
const RETRY_MS = 1000;
const OFFSET_OUT_OF_RANGE = 1;
/** Heartbeat answers that this member left the group or its generation (a session that ran out, a rebalance done). */
const GONE = ["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "FENCED_INSTANCE_ID"];
/** The subscription's user data: none (the cooperative assignor's owned partitions and generation have fields). */
const NO_USER_DATA = Buffer.alloc(0);
const FIRST_FETCH_BYTES = 256 << 10;
const MIN_FETCH_BYTES = 16 << 10;
/**
 * A fetch asks for about this many batches' records in all, shared by its partitions (see #partitionBytes). A fetch
 * is buffered a turn at a time, and each hot buffer the LRU evicts carries the turn's records for it: on the bench's
 * 1000 destinations, 12 rather than 6 took 19.9k flushes rather than 37.8k, 0.9 CPU s fewer and 8% less time, for
 * 150 MB more peak RSS; 24 rather than 12 (with the pipeline's turns and chunks twice as large) 10.9k rather than
 * 18.8k, 0.25 CPU s fewer and 5% less time, for 170 MB more. Under a memory limit the fetch's byte caps
 * (transport/open.ts fetchBytes) bound it first.
 */
const FETCH_BATCHES = 24;

const SASL_MECHANISMS = {
  plain: "PLAIN",
  "scram-sha-256": "SCRAM-SHA-256",
  "scram-sha-512": "SCRAM-SHA-512",
} as const;

interface PartitionState extends PartitionRef {
  readonly key: string;
  assigned: boolean;
  /** Revoked, its hand-over running: nothing more is fetched, and commits of it still land. */
  handing: boolean;
  /** The next offset to fetch; undefined while it is looked up after an assignment. */
  position: bigint | undefined;
  /** Counts the partition's assignments and revocations: a sink failure under an earlier one rewinds nothing. */
  epoch: number;
  /** A batch of it is with the sink: nothing more is fetched for it until the sink resolves. */
  delivering: boolean;
  /** Bytes on the wire per record in its last fetch (compressed batches run 5-15 times smaller); undefined before. */
  bytesPerRecord: number | undefined;
  /** Its last fetch reached the end of the partition, so it does not share in a fetch's records (#partitionBytes). */
  caughtUp: boolean;
}

interface Requested {
  readonly state: PartitionState;
  readonly offset: bigint;
}

export class PlatformaticKafkaTransport implements Transport {
  readonly replayable = true;
  readonly #opts: KafkaTransportOptions;
  readonly #consumer: Consumer;
  /** Fetches get connections of their own, so a fetch the broker holds open never queues a heartbeat or commit. */
  readonly #fetchPool: ConnectionPool;
  readonly #subscription: TopicSubscription;
  /** Lists the broker's topics, with discovery on. */
  #admin: Admin | undefined;
  /** A member of the group (joined, not left). */
  #member = false;
  readonly #parts = new Map<string, PartitionState>();
  readonly #paused = new Set<string>();
  /** Broker nodes with a fetch in flight: one at a time each, as the node's fetch session requires. */
  readonly #inflight = new Map<number, Promise<void>>();
  /** Counts assignments: a fetch or offset lookup started under an earlier one is discarded. */
  #generation = 0;
  /** Hand-overs running: the group is joined again only once they settle. */
  readonly #handOvers = new Set<Promise<unknown>>();
  /**
   * A hand-over's bound: the rebalance timeout less two heartbeat intervals, so a rebalance another member starts
   * meanwhile still finds this member's JoinGroup in time (it learns of it at its next heartbeat).
   */
  readonly #handOverMs: number;
  readonly #heartbeatMs: number;
  /** Aborted by close: a hand-over still running ends, its heartbeats with it. */
  readonly #closing = new AbortController();
  #receiving = false;
  #closed = false;
  #pumping = false;
  #pumpAgain = false;
  #sink: TransportSink | undefined;

  constructor(opts: KafkaTransportOptions) {
    this.#opts = opts;
    const connection = connectionOptions(opts);
    const heartbeatInterval = Math.max(1000, Math.floor(opts.sessionTimeoutMs / 10));
    this.#heartbeatMs = heartbeatInterval;
    this.#handOverMs = Math.max(1000, opts.rebalanceTimeoutMs - 2 * heartbeatInterval);
    this.#consumer = new Consumer({
      clientId: opts.clientId,
      bootstrapBrokers: [...opts.brokers],
      groupId: opts.groupId,
      sessionTimeout: opts.sessionTimeoutMs,
      rebalanceTimeout: opts.rebalanceTimeoutMs,
      heartbeatInterval,
      autocommit: false,
      autocreateTopics: false,
      // Sticky: a rebalance moves only the partitions it must. Round-robin (the library's default) dealt every
      // partition afresh at each join or leave, and each one moved was read again from its committed offset by its
      // next owner while its last owner's files still held it: duplicates (e2e/chaos).
      protocols: [{ name: COOPERATIVE_STICKY_ASSIGNOR, version: 3 }],
      // Asked for before every JoinGroup, the revoke round's rejoin included: resolved once the hand-overs are done.
      protocolsMetadata: () => this.#handedOver(),
      // Its fetch options go unset: the fetches are ours (#fetch), through raw-fetch.ts.
      ...connection,
    });
    this.#fetchPool = new ConnectionPool(opts.clientId, connection);
    this.#subscription = new TopicSubscription(opts, {
      list: () => this.#listTopics(),
      apply: (topics, change) => this.#resubscribe(topics, change),
    });
  }

  async start(sink: TransportSink): Promise<void> {
    this.#sink = sink;
    this.#receiving = true;
    const c = this.#consumer;
    const log = this.#opts.log.child({ component: "platformatic-kafka" });
    // A rebalance the library could not rejoin (retries spent) leaves the group for good: join it again.
    c.on("error", (err: Error) => {
      sink.onState?.("degraded", `consumer left the group, rejoining: ${err.message}`);
      this.#rejoin(err);
    });
    c.on("consumer:heartbeat:stalled", (p) => {
      sink.onState?.("degraded", `heartbeat stalled for ${p.stalledFor} ms`);
      log.warn({ err: p.lastError, stalledForMs: p.stalledFor }, "heartbeat stalled");
    });
    c.on("consumer:group:join", (p) => {
      sink.onState?.("ok");
      this.#onJoin(p);
    });
    // A cooperative rebalance first revokes, in a round of its own that ends in no group:join, then joins again;
    // the round after hands the revoked partitions to other members. They stop here, before that round.
    c.on("consumer:group:rebalance", () => this.#onRevokeRound());
    if (this.#subscription.discovering) {
      this.#admin = new Admin({
        clientId: this.#opts.clientId,
        bootstrapBrokers: [...this.#opts.brokers],
        ...connectionOptions(this.#opts),
      });
    }
    await this.#subscription.start();
  }

  async #listTopics(): Promise<string[]> {
    if (this.#admin === undefined) throw new Error("topic discovery without an admin client");
    // Internal ones too, so topic_exclude decides for both clients alike.
    return this.#admin.listTopics({ includeInternals: true });
  }

  /** Tracks exactly `topics` and joins the group again with them (as the same member), or leaves it for none. */
  async #resubscribe(topics: readonly string[], change: TopicChange): Promise<void> {
    const c = this.#consumer;
    const want = new Set(topics);
    for (const t of c.topics.current) if (!want.has(t)) c.topics.untrack(t);
    for (const t of topics) if (!c.topics.has(t)) c.topics.track(t);
    if (topics.length === 0) {
      if (this.#member) {
        this.#opts.log.info({ removed: change.removed }, "no topic left: leaving the group");
        await c.leaveGroup();
        this.#member = false;
      }
      this.#revokeAll();
      return;
    }
    await c.joinGroup({});
    this.#member = true;
  }

  #rejoin(err: unknown): void {
    if (this.#closed || !this.#member) return;
    this.#opts.log.error({ err }, "consumer group rejoin failed; joining again");
    // A subscribed topic deleted under the group fails every join: discovery drops it.
    this.#subscription.refreshSoon();
    setTimeout(() => {
      if (!this.#closed && this.#member) this.#consumer.joinGroup({}).catch((e: unknown) => this.#rejoin(e));
    }, RETRY_MS);
  }

  #onJoin(payload: ConsumerGroupJoinPayload): void {
    const generation = ++this.#generation;
    const added: PartitionState[] = [];
    const lookup: PartitionState[] = [];
    const now = new Set<string>();
    let kept = 0;
    for (const { topic, partitions } of payload.assignments ?? []) {
      for (const partition of [...partitions].sort((a, b) => a - b)) {
        const key = partitionKey(topic, partition);
        now.add(key);
        let st = this.#parts.get(key);
        if (st?.assigned === true) {
          // Kept: everything before its position was handed over and is held or released already. A lookup of its
          // position the new generation discarded is made again.
          kept++;
          if (st.position === undefined) lookup.push(st);
          continue;
        }
        if (st === undefined) {
          st = {
            topic,
            partition,
            key,
            assigned: true,
            handing: false,
            position: undefined,
            epoch: 0,
            delivering: false,
            bytesPerRecord: undefined,
            caughtUp: false,
          };
          this.#parts.set(key, st);
        }
        // The broker hands the partition over from its committed offset, as the pipeline's tracker expects.
        st.assigned = true;
        st.position = undefined;
        st.epoch++;
        added.push(st);
        lookup.push(st);
      }
    }
    const revoked: PartitionRef[] = [];
    for (const st of this.#parts.values()) {
      if (st.assigned && !now.has(st.key)) {
        this.#unassign(st);
        revoked.push({ topic: st.topic, partition: st.partition });
      }
    }
    const refs = added.map((st) => ({ topic: st.topic, partition: st.partition }));
    this.#opts.log.info(
      { generation: payload.generationId, assigned: groupByTopic(refs), kept, revoked },
      "partitions assigned",
    );
    if (revoked.length > 0) this.#sink?.onRevoked(revoked);
    if (refs.length > 0) this.#sink?.onAssigned(refs);
    if (lookup.length > 0) this.#seek(generation, lookup, true);
  }

  /**
   * What the library's assignment no longer holds is revoked now (a partition it added waits for group:join), and
   * handed over before the rejoin that follows. A topic that left the subscription (deleted, or excluded now) has no
   * next owner to hand it to: its partitions just go.
   */
  #onRevokeRound(): void {
    const held = new Set(
      (this.#consumer.assignments ?? []).flatMap((a) => a.partitions.map((p) => partitionKey(a.topic, p))),
    );
    const moved: PartitionState[] = [];
    const left: PartitionRef[] = [];
    for (const st of this.#parts.values()) {
      if (!st.assigned || held.has(st.key)) continue;
      this.#unassign(st);
      if (this.#consumer.topics.has(st.topic)) moved.push(st);
      else left.push({ topic: st.topic, partition: st.partition });
    }
    if (left.length > 0) {
      this.#opts.log.info({ revoked: left }, "partitions revoked");
      this.#sink?.onRevoked(left);
    }
    this.#handOver(moved);
  }

  /** Hands `revoked` over to the sink, within #handOverMs; commits of them land until it settles. */
  #handOver(revoked: readonly PartitionState[]): void {
    const sink = this.#sink;
    if (revoked.length === 0 || sink === undefined) return;
    const refs = revoked.map((st) => ({ topic: st.topic, partition: st.partition }));
    this.#opts.log.info({ revoked: refs }, "partitions revoked: handing them over");
    for (const st of revoked) st.handing = true;
    const gone = new AbortController();
    const bound = AbortSignal.any([AbortSignal.timeout(this.#handOverMs), gone.signal, this.#closing.signal]);
    const handed = Promise.race([Promise.resolve(sink.onRevoked(refs, bound)), once(bound, "abort")])
      .catch((err: unknown) => this.#opts.log.error({ err, revoked: refs }, "hand-over failed"))
      .finally(() => {
        for (const st of revoked) st.handing = false;
        this.#handOvers.delete(handed);
      });
    this.#handOvers.add(handed);
    void this.#keepAlive(handed, gone);
  }

  /**
   * Heartbeats, a heartbeat interval apart, until `handing` settles. Without them the session ran out first, so a
   * hand-over had the session less two heartbeats: at the chaos test's 10 s session, 8 s, too little to upload the
   * files of a partition its owner had just caught up on. One answered "no longer a member" aborts `gone`: the
   * hand-over's commits would be refused too.
   */
  async #keepAlive(handing: Promise<unknown>, gone: AbortController): Promise<void> {
    let settled = false;
    void handing.finally(() => (settled = true));
    for (;;) {
      await Promise.race([sleep(this.#heartbeatMs), handing]);
      if (settled) return;
      try {
        await this.#heartbeat();
      } catch (err) {
        if (GONE.some((code) => findErrorBy(err as Error, "apiId", code) !== null)) {
          this.#opts.log.warn({ err }, "no longer a member of the group: the hand-over ends");
          gone.abort(err);
          return;
        }
        // The coordinator away or moving: its session runs on, and the next heartbeat may land.
        this.#opts.log.debug({ err }, "hand-over heartbeat failed");
      }
    }
  }

  /** One heartbeat to the group's coordinator, as this member in its generation; a rebalance in progress is fine. */
  async #heartbeat(): Promise<void> {
    const c = this.#consumer;
    const node = await c.findGroupCoordinator();
    const broker = (c.currentMetadata ?? (await c.metadata({ topics: [] }))).brokers.get(node);
    if (broker === undefined) throw new Error(`the group coordinator ${node} is not in the metadata`);
    const connection = await this.#fetchPool.get(broker);
    try {
      await heartbeatV4.api.async(connection, c.groupId, c.generationId, c.memberId ?? "", c.groupInstanceId);
    } catch (err) {
      if (findErrorBy(err as Error, "apiId", "REBALANCE_IN_PROGRESS") === null) throw err;
    }
  }

  /** The subscription's user data, once every hand-over running has settled. */
  async #handedOver(): Promise<Buffer> {
    while (this.#handOvers.size > 0) await Promise.all([...this.#handOvers]);
    return NO_USER_DATA;
  }

  #unassign(st: PartitionState): void {
    st.assigned = false;
    st.position = undefined;
    st.epoch++;
    this.#paused.delete(st.key);
  }

  /** The group is left: every partition is revoked. No one reads them next (no topic is subscribed). */
  #revokeAll(): void {
    this.#generation++;
    const revoked: PartitionRef[] = [];
    for (const st of this.#parts.values()) {
      if (!st.assigned) continue;
      this.#unassign(st);
      revoked.push({ topic: st.topic, partition: st.partition });
    }
    if (revoked.length === 0) return;
    this.#opts.log.info({ revoked }, "partitions revoked");
    this.#sink?.onRevoked(revoked);
  }

  /** Sets where each partition reads from: its committed offset, else (or when told to) its earliest. */
  #seek(generation: number, parts: readonly PartitionState[], committedFirst: boolean): void {
    const topics = groupByTopic(parts);
    const lookup = async (): Promise<void> => {
      const committed = committedFirst
        ? await this.#consumer.listCommittedOffsets({ topics })
        : new Map<string, bigint[]>();
      const missing = parts.filter((st) => (committed.get(st.topic)?.[st.partition] ?? -1n) < 0n);
      const earliest =
        missing.length === 0
          ? new Map<string, bigint[]>()
          : await this.#consumer.listOffsets({
              topics: [...new Set(missing.map((st) => st.topic))],
              partitions: Object.fromEntries(groupByTopic(missing).map((t) => [t.topic, t.partitions])),
              timestamp: ListOffsetTimestamps.EARLIEST,
            });
      if (generation !== this.#generation) return;
      for (const st of parts) {
        const c = committed.get(st.topic)?.[st.partition] ?? -1n;
        const offset = c >= 0n ? c : earliest.get(st.topic)?.[st.partition];
        if (offset === undefined) throw new Error(`no offset for ${st.key}`);
        st.position = offset;
      }
    };
    lookup().then(
      () => this.#pump(),
      (err: unknown) => {
        if (!this.#receiving || generation !== this.#generation) return;
        this.#opts.log.warn({ err, partitions: topics }, "offset lookup failed; retrying");
        setTimeout(() => this.#generation === generation && this.#seek(generation, parts, committedFirst), RETRY_MS);
      },
    );
  }

  /** Sends a fetch to every broker with no fetch in flight that leads a partition ready to read. */
  #pump(): void {
    if (!this.#receiving) return;
    if (this.#pumping) {
      this.#pumpAgain = true;
      return;
    }
    const topics = [...new Set([...this.#parts.values()].filter((st) => st.assigned).map((st) => st.topic))];
    if (topics.length === 0) return;
    this.#pumping = true;
    this.#consumer.metadata({ topics }).then(
      (md) => {
        this.#pumping = false;
        this.#fetchReady(md);
        if (this.#pumpAgain) {
          this.#pumpAgain = false;
          this.#pump();
        }
      },
      (err: unknown) => {
        this.#pumping = false;
        this.#pumpAgain = false;
        if (!this.#receiving) return;
        this.#opts.log.warn({ err }, "metadata refresh failed; retrying");
        // Often a subscribed topic deleted: discovery drops it.
        this.#subscription.refreshSoon();
        setTimeout(() => this.#pump(), RETRY_MS);
      },
    );
  }

  #fetchReady(md: ClusterMetadata): void {
    if (!this.#receiving) return;
    const byNode = new Map<number, PartitionState[]>();
    const busy = new Set<number>();
    for (const st of this.#parts.values()) {
      if (!st.assigned || st.position === undefined || this.#paused.has(st.key)) continue;
      const leader = md.topics.get(st.topic)?.partitions[st.partition]?.leader;
      if (leader === undefined || leader < 0 || this.#inflight.has(leader)) continue;
      if (st.delivering) {
        busy.add(leader);
        continue;
      }
      const list = byNode.get(leader) ?? [];
      list.push(st);
      byNode.set(leader, list);
    }
    // A fetch of caught-up partitions alone is held by the broker up to its wait, and the node's partitions whose
    // batches the sink is finishing would wait behind it: while any is with the sink, the wait is short.
    for (const [node, parts] of byNode) this.#fetch(md, node, parts, busy.has(node) ? BUSY_WAIT_MS : MAX_WAIT_MS);
  }

  #fetch(md: ClusterMetadata, node: number, parts: readonly PartitionState[], waitMs: number): void {
    const generation = this.#generation;
    const requested = new Map<string, Requested>();
    const byTopic = new Map<string, FetchRequestTopic>();
    const topicNames = new Map<string, string>();
    const reading = parts.filter((st) => !st.caughtUp).length;
    for (const st of parts) {
      const topicId = md.topics.get(st.topic)?.id;
      if (topicId === undefined || st.position === undefined) continue;
      topicNames.set(topicId, st.topic);
      let t = byTopic.get(st.topic);
      if (t === undefined) {
        t = { topicId, partitions: [] };
        byTopic.set(st.topic, t);
      }
      t.partitions.push({
        partition: st.partition,
        fetchOffset: st.position,
        partitionMaxBytes: this.#partitionBytes(st, reading),
        currentLeaderEpoch: -1,
        lastFetchedEpoch: -1,
      });
      requested.set(st.key, { state: st, offset: st.position });
    }
    const broker = md.brokers.get(node);
    if (broker === undefined) {
      this.#consumer.clearMetadata();
      setTimeout(() => this.#pump(), RETRY_MS);
      return;
    }
    // Sessionless (id 0, epoch -1): every request names all its partitions, so nothing rests on broker-side state.
    const fetched = this.#fetchPool
      .get(broker)
      .then((connection) =>
        rawFetch.async(
          connection,
          waitMs,
          1,
          this.#opts.maxBytes,
          FetchIsolationLevels.READ_COMMITTED,
          0,
          -1,
          [...byTopic.values()],
          [],
          "",
        ),
      )
      .then(
        (response) => {
          this.#inflight.delete(node);
          if (this.#receiving && generation === this.#generation) this.#deliver(response, topicNames, requested);
          // Once the microtasks have run, a sink that resolved at once has its partition in the next fetch.
          setImmediate(() => this.#pump());
        },
        (err: unknown) => {
          this.#inflight.delete(node);
          if (!this.#receiving) return;
          if (generation === this.#generation && this.#outOfRange(err, topicNames, requested)) {
            this.#pump();
            return;
          }
          this.#opts.log.warn({ err, node }, "fetch failed; retrying");
          this.#consumer.clearMetadata();
          this.#subscription.refreshSoon();
          setTimeout(() => this.#pump(), RETRY_MS);
        },
      );
    this.#inflight.set(node, fetched);
  }

  /**
   * A fetch of a partition asks for records by its last fetch's bytes per record: batchRecords, or more when fewer
   * than FETCH_BATCHES partitions share the fetch. Sized in bytes alone, a compressed topic's fetch held ten times
   * the records, routed and buffered as one block while the other stages waited; sized at batchRecords each, a
   * partition left alone (the others caught up) came batch by batch, each evicting every hot buffer for a tenth of
   * the records and keeping one lane busy. A first fetch asks for FIRST_FETCH_BYTES; the broker sends one whole batch
   * at least.
   */
  #partitionBytes(st: PartitionState, partitions: number): number {
    if (st.bytesPerRecord === undefined) return Math.min(FIRST_FETCH_BYTES, this.#opts.maxBytesPerPartition);
    const records = this.#opts.batchRecords * Math.max(1, FETCH_BATCHES / partitions);
    const bytes = Math.ceil(st.bytesPerRecord * records);
    return Math.max(MIN_FETCH_BYTES, Math.min(this.#opts.maxBytesPerPartition, bytes));
  }

  #deliver(response: RawFetchResponse, topicNames: Map<string, string>, requested: Map<string, Requested>): void {
    for (const t of response.responses) {
      const topic = topicNames.get(t.topicId);
      if (topic === undefined) continue;
      for (const p of t.partitions) {
        const req = requested.get(partitionKey(topic, p.partitionIndex));
        // A partition paused, re-assigned or lingering in the fetch session since the request went out: its records
        // are read again from its position.
        if (req === undefined || req.state.position !== req.offset || this.#paused.has(req.state.key)) continue;
        const { end, lastOffset } = wholeBatches(p.records);
        req.state.caughtUp = (end === 0 ? Number(req.offset) : lastOffset + 1) >= Number(p.highWatermark);
        if (end === 0) continue;
        const from = Number(req.offset);
        // Control batches alone (transaction markers) are handed too: their offsets are received, so committed.
        if (lastOffset < from) continue;
        req.state.position = BigInt(lastOffset + 1);
        req.state.bytesPerRecord = end / (lastOffset - from + 1);
        this.#hand(req.state, {
          topic,
          partition: p.partitionIndex,
          encoded: {
            bytes: p.records.subarray(0, end),
            fromOffset: from,
            lastOffset,
            aborted: p.abortedTransactions,
          },
          highWatermark: p.highWatermark.toString(),
        });
      }
    }
  }

  #hand(st: PartitionState, batch: EncodedBatch): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    const epoch = st.epoch;
    st.delivering = true;
    sink.onBatch(batch).then(
      () => {
        st.delivering = false;
        this.#pump();
      },
      (err: unknown) => {
        // The batch is read again, after a pause so a failing sink does not spin.
        this.#opts.log.error(
          { err, topic: st.topic, partition: st.partition },
          "sink failed a batch; reading it again",
        );
        if (epoch === st.epoch) st.position = BigInt(batch.encoded.fromOffset);
        setTimeout(() => {
          st.delivering = false;
          this.#pump();
        }, RETRY_MS);
      },
    );
  }

  /** Partitions whose position the broker no longer has (retention, a recreated topic) read from their earliest. */
  #outOfRange(err: unknown, topicNames: Map<string, string>, requested: Map<string, Requested>): boolean {
    if (!(err instanceof Error) || !findErrorBy(err, "apiId", "OFFSET_OUT_OF_RANGE")) return false;
    const response = (err as { response?: RawFetchResponse }).response;
    const reset: PartitionState[] = [];
    for (const t of response?.responses ?? []) {
      const topic = topicNames.get(t.topicId);
      if (topic === undefined) continue;
      for (const p of t.partitions) {
        const req = requested.get(partitionKey(topic, p.partitionIndex));
        if (p.errorCode !== OFFSET_OUT_OF_RANGE || req === undefined || req.state.position !== req.offset) continue;
        req.state.position = undefined;
        reset.push(req.state);
      }
    }
    if (reset.length === 0) return false;
    this.#opts.log.warn({ partitions: groupByTopic(reset) }, "fetch offset out of range: reading from the earliest");
    this.#seek(this.#generation, reset, false);
    return true;
  }

  async commit(offsets: readonly CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    // Mid-join (JoinGroup sent, SyncGroup not yet answered) a commit carries the generation the join is replacing: the
    // broker refuses it once the join completes, and the library answers a refused commit by joining again, which
    // starts another rebalance. With a commit a second from each member, the group rebalanced every second for half a
    // minute (e2e/chaos). A hand-over holds the JoinGroup back, so its commits still go; so do a drain's, the last this
    // member makes, or a drain waiting out a dead member's session commits nothing.
    if (this.#receiving && this.#handOvers.size === 0 && !this.#consumer.isActive()) {
      throw new ArchiverError("kafka_commit_failed", "a rebalance is in progress: committed once it ends", "retryable");
    }
    // A commit computed before a rebalance took a partition away must not land over its new owner's; one of a partition
    // being handed over lands, since no one else reads it yet.
    const mine = offsets.filter((o) => {
      const st = this.#parts.get(partitionKey(o.topic, o.partition));
      return st !== undefined && (st.assigned || st.handing);
    });
    if (mine.length > 0) await this.#commit(mine);
    if (mine.length < offsets.length) {
      throw new ArchiverError(
        "kafka_commit_failed",
        "offsets of partitions no longer assigned were not committed",
        "retryable",
      );
    }
  }

  async #commit(offsets: readonly CommitOffset[]): Promise<void> {
    try {
      await this.#consumer.commit({
        offsets: offsets.map((o) => ({
          topic: o.topic,
          partition: o.partition,
          offset: BigInt(o.offset),
          leaderEpoch: -1,
        })),
      });
    } catch (err) {
      // A commit that fails (rebalance, broker away) is retried at the next commit with a floor at least as high.
      throw new ArchiverError("kafka_commit_failed", `offset commit failed: ${(err as Error).message}`, "retryable", {
        cause: err,
      });
    }
  }

  pause(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#paused.add(partitionKey(p.topic, p.partition));
  }

  resume(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#paused.delete(partitionKey(p.topic, p.partition));
    this.#pump();
  }

  /** Fetches stop and what a fetch in flight returns is dropped; the group membership (and so commits) stays. */
  async stopReceiving(): Promise<void> {
    this.#receiving = false;
    await this.#subscription.stop();
  }

  async close(): Promise<void> {
    this.#receiving = false;
    this.#closing.abort(new Error("the transport is closing"));
    await this.#subscription.stop();
    this.#closed = true;
    // A fetch in flight returns within MAX_WAIT_MS (a caught-up long poll, 34-112 ms still to run at the end of a
    // bench drain), and what it returns is dropped: its connection closes once it has, behind the close rather than
    // ahead of it. Closed under the fetch, the client would leave the request's 30 s timer pending.
    void Promise.all(this.#inflight.values())
      .then(() => this.#fetchPool.close())
      .catch((err: unknown) => this.#opts.log.warn({ err }, "closing the fetch connections failed"));
    await this.#admin?.close();
    await this.#leave();
  }

  /**
   * Leaves the group. The broker refuses while its coordinator moves (NOT_COORDINATOR while it restarts): tried again
   * for a session timeout, then left to the session to expire. The drain's commits landed before, so the partitions'
   * next owners read nothing of them again; a failed leave made a drained process exit non-zero.
   */
  async #leave(): Promise<void> {
    const deadline = performance.now() + this.#opts.sessionTimeoutMs;
    for (;;) {
      try {
        await this.#consumer.close();
        return;
      } catch (err) {
        if (performance.now() >= deadline) {
          this.#opts.log.warn(
            { err },
            "leaving the group failed: the broker gives the partitions on at the session timeout",
          );
          return;
        }
        await sleep(RETRY_MS);
      }
    }
  }
}

function partitionKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

function connectionOptions(opts: KafkaTransportOptions): { tls?: ConnectionOptions; sasl?: SASLOptions } {
  return {
    ...(opts.ssl ? { tls: opts.ssl === true ? {} : opts.ssl } : {}),
    ...(opts.sasl
      ? {
          sasl: {
            mechanism: SASL_MECHANISMS[opts.sasl.mechanism],
            username: opts.sasl.username,
            password: opts.sasl.password,
          },
        }
      : {}),
  };
}
