// Which of the broker's topics discovery consumes (an empty kafka.topics): every topic topic_exclude keeps, narrowed
// by topic_include when set; of a landing topic and its transformed twin (the landing name plus one of
// transformed_topic_suffixes) only the landing one, since the archiver keeps each record as it arrived.

export interface DiscoveryRules {
  /** A topic must match one of these, when set. */
  readonly include: readonly RegExp[] | undefined;
  /** A topic matching any of these is never consumed. */
  readonly exclude: readonly RegExp[];
  /** A topic named like another kept topic plus one of these is that topic's transformed twin. */
  readonly transformedSuffixes: readonly string[];
}

export interface TopicChange {
  readonly added: readonly string[];
  readonly removed: readonly string[];
}

export function discoveryRules(k: {
  readonly topic_include?: readonly string[] | undefined;
  readonly topic_exclude: readonly string[];
  readonly transformed_topic_suffixes: readonly string[];
}): DiscoveryRules {
  return {
    include: k.topic_include?.map((p) => new RegExp(p)),
    exclude: k.topic_exclude.map((p) => new RegExp(p)),
    transformedSuffixes: k.transformed_topic_suffixes,
  };
}

/**
 * The topics to consume of the broker's `topics`, sorted. The twin rule looks only at the topics the filters kept:
 * a transformed topic whose landing topic does not exist, or is filtered out, is the only copy of its source on
 * offer and is consumed.
 */
export function selectTopics(topics: Iterable<string>, rules: DiscoveryRules): string[] {
  const kept = new Set<string>();
  for (const t of topics) {
    if (rules.exclude.some((r) => r.test(t))) continue;
    if (rules.include !== undefined && !rules.include.some((r) => r.test(t))) continue;
    kept.add(t);
  }
  const out: string[] = [];
  for (const t of kept) if (!isTwin(t, kept, rules.transformedSuffixes)) out.push(t);
  return out.sort();
}

function isTwin(topic: string, kept: ReadonlySet<string>, suffixes: readonly string[]): boolean {
  return suffixes.some((s) => topic.length > s.length && topic.endsWith(s) && kept.has(topic.slice(0, -s.length)));
}

/** What changes from subscribing `from` to subscribing `to`. */
export function topicChange(from: readonly string[], to: readonly string[]): TopicChange {
  const a = new Set(from);
  const b = new Set(to);
  return {
    added: to.filter((t) => !a.has(t)),
    removed: from.filter((t) => !b.has(t)),
  };
}
