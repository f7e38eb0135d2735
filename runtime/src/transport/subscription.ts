// The consumer's topic set: a fixed kafka.topics list, or discovery, which re-reads the broker's topic list every
// topic_refresh_secs and hands the transport each new selection to subscribe to, one change at a time. Shared by both
// Kafka clients; how a client changes its subscription is its own.
import type { Gauge } from "prom-client";
import type { Logger } from "pino";
import { selectTopics, topicChange, type DiscoveryRules, type TopicChange } from "./discovery.ts";

export interface TopicDiscovery {
  readonly rules: DiscoveryRules;
  readonly refreshMs: number;
}

/** The topics to consume, or how to discover them. */
export type TopicSource = readonly string[] | TopicDiscovery;

/** Soonest a refresh follows the previous one when a client asks for it early (a subscribed topic looks gone). */
const SOON_MS = 1000;
/** Longest wait after a failed refresh before the next attempt. */
const RETRY_MS = 5000;

export interface SubscriptionOptions {
  readonly topics: TopicSource;
  readonly log: Logger;
  /** Set to the number of topics subscribed. */
  readonly topicsSubscribed?: Gauge | undefined;
}

/** What a Kafka client does for its subscription. */
export interface SubscriptionClient {
  /** The broker's topic names. */
  list(): Promise<readonly string[]>;
  /** Makes the consumer's subscription exactly `topics` (none: consume nothing). Never called concurrently. */
  apply(topics: readonly string[], change: TopicChange): Promise<void>;
}

export class TopicSubscription {
  readonly #o: SubscriptionOptions;
  readonly #client: SubscriptionClient;
  #topics: readonly string[] = [];
  /** The last apply failed: the client's subscription is unknown, so the next refresh applies even an unchanged set. */
  #dirty = false;
  #applied = false;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #lastStart = 0;
  #stopped = false;

  constructor(opts: SubscriptionOptions, client: SubscriptionClient) {
    this.#o = opts;
    this.#client = client;
  }

  /** The topics currently subscribed. */
  get topics(): readonly string[] {
    return this.#topics;
  }

  get discovering(): boolean {
    return !isStatic(this.#o.topics);
  }

  /** Subscribes to the fixed list, or to the first discovery; a broker that cannot be listed fails the start. */
  async start(): Promise<void> {
    const source = this.#o.topics;
    if (isStatic(source)) {
      await this.#apply([...source]);
      return;
    }
    this.#o.log.info(
      {
        include: source.rules.include?.map(String),
        exclude: source.rules.exclude.map(String),
        transformedSuffixes: source.rules.transformedSuffixes,
        refreshMs: source.refreshMs,
      },
      "topic discovery on",
    );
    this.#lastStart = Date.now();
    const run = (async () => this.#apply(selectTopics(await this.#client.list(), source.rules)))();
    this.#running = run;
    try {
      await run;
    } finally {
      this.#running = undefined;
    }
    this.#schedule(source.refreshMs);
  }

  /** Re-reads the broker soon rather than at the next interval; with a fixed list, nothing. */
  refreshSoon(): void {
    if (this.#stopped || !this.discovering || this.#running !== undefined) return;
    this.#schedule(Math.max(0, this.#lastStart + SOON_MS - Date.now()));
  }

  /** No more refreshes; resolves once one in progress has finished. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      const run = this.#refresh();
      this.#running = run;
      void run.finally(() => {
        this.#running = undefined;
      });
    }, ms);
    this.#timer.unref();
  }

  async #refresh(): Promise<void> {
    const source = this.#o.topics;
    if (isStatic(source) || this.#stopped) return;
    this.#lastStart = Date.now();
    let next = source.refreshMs;
    try {
      await this.#apply(selectTopics(await this.#client.list(), source.rules));
    } catch (err) {
      next = Math.min(next, RETRY_MS);
      this.#o.log.warn({ err, retryInMs: next }, "topic discovery failed; trying again");
    }
    this.#schedule(next);
  }

  async #apply(topics: readonly string[]): Promise<void> {
    const change = topicChange(this.#topics, topics);
    if (this.#applied && !this.#dirty && change.added.length === 0 && change.removed.length === 0) return;
    this.#dirty = true;
    await this.#client.apply(topics, change);
    this.#dirty = false;
    const first = !this.#applied;
    this.#applied = true;
    this.#topics = topics;
    this.#o.topicsSubscribed?.set(topics.length);
    if (topics.length === 0) {
      this.#o.log.warn({ removed: change.removed }, "no topic to consume: waiting for discovery to find one");
    } else {
      this.#o.log.info(
        { added: change.added, removed: change.removed, subscribed: topics.length },
        first ? "subscribed" : "subscription changed",
      );
    }
  }
}

function isStatic(source: TopicSource): source is readonly string[] {
  return Array.isArray(source);
}
