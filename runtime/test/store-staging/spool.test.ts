import { test } from "node:test";
import assert from "node:assert/strict";
import { ArchiverError, ConfigError } from "../../src/errors.ts";
import {
  checkSpoolFree,
  parseQuantity,
  parseWritablePathLimits,
  resolveSpoolBudget,
  WRITABLE_PATH_LIMITS_ENV,
} from "../../src/store/spool.ts";
import { tempDir } from "./helpers.ts";

const GIB = 1024 ** 3;
const SPOOL = "/var/spool/dfe/archiver";

const cfg = (buffer: Record<string, number> = {}, spool_dir = SPOOL) => ({ buffer: { spool_dir, ...buffer } });
const env = (limits: string) => ({ [WRITABLE_PATH_LIMITS_ENV]: limits });

test("sizes are byte counts or Kubernetes quantities, computed exactly and rounded up to a byte", () => {
  const cases: [string, number][] = [
    ["10Gi", 10 * GIB],
    ["500Mi", 500 * 1024 ** 2],
    ["1G", 1e9],
    ["1.5Gi", 1.5 * GIB],
    ["1e9", 1e9],
    ["1E9", 1e9],
    ["100k", 100_000],
    ["1073741824", GIB],
    ["1Ki", 1024],
    ["2Ti", 2 * 1024 ** 4],
    ["1P", 1e15],
    ["1Pi", 1024 ** 5],
    ["1.1G", 1_100_000_000],
    ["0.5", 1],
    [".5Ki", 512],
    ["15e-1", 2],
    ["0", 0],
  ];
  for (const [text, bytes] of cases) assert.equal(parseQuantity(text), bytes, text);
  for (const bad of ["", "Gi", "10GiB", "10gi", "-1Gi", "+1Gi", "100m", "1.5.5", "1 Gi", "ten", "1e", "10Ei"]) {
    assert.equal(parseQuantity(bad), undefined, bad);
  }
});

test("the contract's 10Gi volume gives a 9 GiB budget: 8, 1 and 1 GiB", () => {
  const b = resolveSpoolBudget(cfg(), env(`${SPOOL}=10Gi`));
  assert.deepEqual(b, {
    stagedBytesCap: 8 * GIB,
    minFreeSpoolBytes: GIB,
    quarantineBytesCap: GIB,
    budget: 9 * GIB,
    declaredPath: SPOOL,
  });
  assert.ok(b.stagedBytesCap + b.quarantineBytesCap < 10 * GIB, "staging and quarantine stay under the limit");
});

test("a larger volume raises all three", () => {
  const b = resolveSpoolBudget(cfg(), env(`${SPOOL}=50Gi`));
  assert.equal(b.budget, 45 * GIB);
  assert.equal(b.stagedBytesCap, 40 * GIB);
  assert.equal(b.minFreeSpoolBytes, 5 * GIB);
  assert.equal(b.quarantineBytesCap, 5 * GIB);
});

test("with no limit declared for the spool volume the sizes are 8, 1 and 1 GiB", () => {
  const undeclared = { stagedBytesCap: 8 * GIB, minFreeSpoolBytes: GIB, quarantineBytesCap: GIB };
  assert.deepEqual(resolveSpoolBudget(cfg(), {}), undeclared);
  assert.deepEqual(resolveSpoolBudget(cfg(), env("")), undeclared);
  assert.deepEqual(resolveSpoolBudget(cfg(), env("/tmp=1Gi,/var/spool/dfe/arch=1Gi")), undeclared, "not a parent");
});

test("the declared path holding the spool is the longest prefix on segment boundaries", () => {
  const limits = "/var=100Gi, /var/spool/dfe=10Gi ,/var/spool/dfe/archiver-other=1Gi,/=1000Gi,";
  assert.equal(resolveSpoolBudget(cfg(), env(limits)).declaredPath, "/var/spool/dfe");
  assert.equal(resolveSpoolBudget(cfg({}, "/data/spool"), env(limits)).declaredPath, "/");
  assert.equal(resolveSpoolBudget(cfg(), env(`${SPOOL}/=10Gi`)).declaredPath, SPOOL, "trailing slash");
  assert.equal(resolveSpoolBudget(cfg({}, `${SPOOL}/`), env(`${SPOOL}=10Gi`)).declaredPath, SPOOL);
});

test("a configured key wins over the derived size, the others still derived", () => {
  const b = resolveSpoolBudget(cfg({ staged_bytes_cap: 12345 }), env(`${SPOOL}=10Gi`));
  assert.deepEqual([b.stagedBytesCap, b.minFreeSpoolBytes, b.quarantineBytesCap], [12345, GIB, GIB]);
  const c = resolveSpoolBudget(cfg({ min_free_spool_bytes: 0, quarantine_bytes_cap: 7 }), {});
  assert.deepEqual([c.stagedBytesCap, c.minFreeSpoolBytes, c.quarantineBytesCap], [8 * GIB, 0, 7]);
});

test("a malformed SCALO_WRITABLE_PATH_LIMITS is a ConfigError naming the variable and the bad pair", () => {
  for (const [value, pair] of [
    [`${SPOOL}=ten`, `${SPOOL}=ten`],
    ["/tmp=1Gi,/var/spool", "/var/spool"],
    ["var/spool=1Gi", "var/spool=1Gi"],
    ["/a=1Gi,/a/=2Gi", "/a/=2Gi"],
    [`${SPOOL}=10GB`, `${SPOOL}=10GB`],
  ] as const) {
    assert.throws(
      () => parseWritablePathLimits(value),
      (err: unknown) =>
        err instanceof ConfigError &&
        err.key === WRITABLE_PATH_LIMITS_ENV &&
        err.message.startsWith(`${WRITABLE_PATH_LIMITS_ENV}:`) &&
        err.message.includes(`"${pair}"`),
      value,
    );
  }
  assert.throws(() => resolveSpoolBudget(cfg(), env(`${SPOOL}=x`)), ConfigError);
});

test("a declared limit too small to stage anything is refused unless staged_bytes_cap is set", () => {
  assert.throws(() => resolveSpoolBudget(cfg(), env(`${SPOOL}=1`)), /SCALO_WRITABLE_PATH_LIMITS: .*leaves nothing/);
  assert.equal(resolveSpoolBudget(cfg({ staged_bytes_cap: 5 }), env(`${SPOOL}=1`)).stagedBytesCap, 5);
});

test("startup refuses a spool volume with less than min_free_spool_bytes free when nothing waits to upload", async () => {
  const dir = await tempDir();
  const ok = await checkSpoolFree({ spoolDir: dir, minFreeSpoolBytes: 0, toUpload: 0 });
  assert.ok(ok.freeBytes > 0);
  assert.equal(ok.warning, undefined);
  const need = Number.MAX_SAFE_INTEGER;
  await assert.rejects(
    checkSpoolFree({ spoolDir: `${dir}/spool`, minFreeSpoolBytes: need, toUpload: 0 }),
    (err: unknown) =>
      err instanceof ArchiverError &&
      err.kind === "permanent" &&
      err.code === "spool_low_free" &&
      /has \d+ bytes free/.test(err.message) &&
      err.message.includes(`buffer.min_free_spool_bytes (${need})`) &&
      err.message.includes("sizeLimit"),
  );
  const warned = await checkSpoolFree({ spoolDir: dir, minFreeSpoolBytes: need, toUpload: 3 });
  assert.match(warned.warning ?? "", /starting anyway to upload the 3 staged files/);
});
