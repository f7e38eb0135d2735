// Azure Blob Storage: each attempt puts a file of one chunk or less as one request (Put Blob, with its MD5, which the
// service checks), or stages the file's blocks, at most PARTS_IN_FLIGHT at once, then commits the block list with the
// metadata. Blocks no commit names are discarded by the service, which is the abort.
// Credentials, first that is set: archive.azure.account_key, archive.azure.sas_token, AZURE_STORAGE_KEY (with
// AZURE_STORAGE_ACCOUNT), else a managed identity through @azure/identity when it is installed.
import { createHash, randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import type { TokenCredential } from "@azure/core-auth";
import {
  BlobServiceClient,
  RestError,
  StorageSharedKeyCredential,
  type ContainerClient,
  type StoragePipelineOptions,
} from "@azure/storage-blob";
import type { ResolvedConfig } from "../../config/resolve.ts";
import { ConfigError } from "../../errors.ts";
import { genericFault, redactor, uploadError, type FaultReader, type Redact } from "./fail.ts";
import { StagedFile } from "./staged.ts";
import { checkKey, joinKey, objectMetadata, type ObjectBackend, type UploadMeta } from "./types.ts";

/** A blob's limits: committed blocks, and bytes in a block. */
const MAX_BLOCKS = 50_000;
const MAX_BLOCK_BYTES = 4000 * 1024 * 1024;

// Refusals of the blob itself. The container's name, the only other name in a request, is checked at open.
const PERMANENT = new Set(["InvalidBlobOrBlock", "RequestBodyTooLarge", "InvalidResourceName", "OutOfRangeInput"]);

export const azureFaults: FaultReader = {
  fault(err) {
    if (err instanceof RestError)
      return { code: err.code ?? `http_${err.statusCode ?? 0}`, status: err.statusCode, message: err.message };
    return genericFault(err);
  },
  permanent: (fault) => PERMANENT.has(fault.code),
};

// Container names: 3-63 of a-z 0-9 -, alphanumeric at both ends, no two hyphens in a row.
const CONTAINER = /^(?=.{3,63}$)[a-z0-9](?:-?[a-z0-9])*$/;

// A hung connection fails its try instead of holding the upload.
const PIPELINE: StoragePipelineOptions = { retryOptions: { maxTries: 3, tryTimeoutInMs: 120_000 } };

/** A managed identity, when @azure/identity is installed (it is not a dependency of the archiver). */
function managedIdentity(): TokenCredential {
  const require = createRequire(import.meta.url);
  let identity: { DefaultAzureCredential: new () => TokenCredential };
  try {
    identity = require("@azure/identity") as typeof identity;
  } catch (err) {
    if ((err as { code?: unknown }).code !== "MODULE_NOT_FOUND") throw err;
    throw new ConfigError(
      "archive.azure.account_key",
      "no Azure credential is set, and a managed identity needs @azure/identity, which this build does not include: " +
        "set archive.azure.account_key (or AZURE_STORAGE_KEY with AZURE_STORAGE_ACCOUNT) or archive.azure.sas_token",
    );
  }
  return new identity.DefaultAzureCredential();
}

/** The container client of an az:// destination, with the first credential that is set, and its secrets. */
export function azureContainerClient(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
  container: string,
): { client: ContainerClient; secrets: string[] } {
  const a = cfg.archive.azure;
  const endpoint = a.endpoint?.replace(/\/+$/, "");
  // Azurite's endpoint names the account in its path (http://127.0.0.1:10000/devstoreaccount1).
  const fromPath = endpoint === undefined ? undefined : new URL(endpoint).pathname.split("/")[1] || undefined;
  const account = a.account_name ?? (env.AZURE_STORAGE_ACCOUNT || undefined) ?? fromPath;
  if (endpoint === undefined && account === undefined)
    throw new ConfigError(
      "archive.azure.account_name",
      "is required for az:// destinations (or AZURE_STORAGE_ACCOUNT, or archive.azure.endpoint)",
    );
  const url = endpoint ?? `https://${account}.blob.core.windows.net`;
  const sharedKey = (key: string) => {
    if (account === undefined)
      throw new ConfigError("archive.azure.account_name", "is required with an account key (or AZURE_STORAGE_ACCOUNT)");
    return new StorageSharedKeyCredential(account, key);
  };
  let service: BlobServiceClient;
  let secrets: string[];
  if (a.account_key !== undefined) {
    service = new BlobServiceClient(url, sharedKey(a.account_key), PIPELINE);
    secrets = [a.account_key];
  } else if (a.sas_token !== undefined) {
    service = new BlobServiceClient(`${url}?${a.sas_token.replace(/^\?/, "")}`, undefined, PIPELINE);
    secrets = [a.sas_token];
  } else if (env.AZURE_STORAGE_KEY) {
    service = new BlobServiceClient(url, sharedKey(env.AZURE_STORAGE_KEY), PIPELINE);
    secrets = [env.AZURE_STORAGE_KEY];
  } else {
    service = new BlobServiceClient(url, managedIdentity(), PIPELINE);
    secrets = [];
  }
  return { client: service.getContainerClient(container), secrets };
}

export class AzureBackend implements ObjectBackend {
  readonly scheme = "az";
  readonly bucket: string;
  readonly #prefix: string;
  readonly #container: ContainerClient;
  readonly #chunkSize: number;
  readonly #redact: Redact;

  constructor(opts: { container: ContainerClient; prefix: string; chunkSize: number; redact: Redact }) {
    this.bucket = opts.container.containerName;
    this.#prefix = opts.prefix;
    this.#container = opts.container;
    this.#chunkSize = opts.chunkSize;
    this.#redact = opts.redact;
  }

  key(relPath: string): string {
    return joinKey(this.#prefix, relPath);
  }

  async upload(opts: { stagedPath: string; size: number; key: string; meta: UploadMeta; signal?: AbortSignal }) {
    const { key, signal } = opts;
    checkKey(key);
    const where = `az://${this.bucket}/${key}`;
    const staged = await StagedFile.open(opts.stagedPath, opts.size);
    const blob = this.#container.getBlockBlobClient(key);
    // Ids are one width within a blob, as the service requires; the attempt's own tag keeps a late block of an
    // earlier attempt out of this one's list.
    const tag = randomBytes(6).toString("hex");
    const blockId = (n: number) => Buffer.from(`${tag}-${String(n).padStart(6, "0")}`).toString("base64");
    const partSize = Math.min(MAX_BLOCK_BYTES, Math.max(this.#chunkSize, Math.ceil(opts.size / MAX_BLOCKS)));
    // Azure metadata names are C# identifiers, so opened_at rather than opened-at.
    const metadata = objectMetadata(opts.meta, "_");
    const ids: string[] = [];
    let op = "stage block";
    try {
      // One block or less goes in one request: staged as a block, it would take two (the block, the commit).
      if (opts.size <= partSize) {
        op = "put blob";
        const body = await staged.whole();
        const transactionalContentMD5 = createHash("md5").update(body).digest();
        await blob.upload(body, body.length, { metadata, transactionalContentMD5, abortSignal: signal });
        return;
      }
      await staged.sendParts({ partSize, emptyPart: false, signal }, async (part, abortSignal) => {
        const id = blockId(part.number);
        await blob.stageBlock(id, part.data, part.data.length, { abortSignal });
        ids[part.number - 1] = id;
      });
      op = "commit block list";
      await blob.commitBlockList(ids, { metadata, abortSignal: signal });
    } catch (err) {
      throw uploadError(err, op, where, signal, azureFaults, this.#redact);
    } finally {
      await staged.close();
    }
  }
}

/** The backend of an az:// destination. */
export function openAzure(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
  container: string,
  prefix: string,
): ObjectBackend {
  if (!CONTAINER.test(container))
    throw new ConfigError(
      cfg.archive.azure.container === undefined ? "archive.destination" : "archive.azure.container",
      `${JSON.stringify(container)} is not an Azure container name (3-63 of a-z 0-9 -, alphanumeric at both ends)`,
    );
  const { client, secrets } = azureContainerClient(cfg, env, container);
  return new AzureBackend({
    container: client,
    prefix,
    chunkSize: cfg.archive.multipart_chunk_size,
    redact: redactor(secrets),
  });
}
