// Process memory as the kernel counts it against the cgroup limit (RSS), read cheaply enough to call per batch:
// process.memoryUsage.rss() reads one figure, where process.memoryUsage() also collects V8's heap statistics.
export type ReadRss = () => number;

export const readRss: ReadRss = () => process.memoryUsage.rss();

/** RSS over the memory guard's limit: the raw memory ratio the scaling terms and the memory gate read. */
export function memoryRatio(rssBytes: number, limitBytes: number): number {
  return limitBytes > 0 ? rssBytes / limitBytes : 0;
}
