// Publish a post through sgw and follow it to its final status.
//
//   SGW_BASE_URL=http://127.0.0.1:8080 SGW_API_KEY=sgk_test_... node publish_and_follow.mjs [image.jpg]
//
// Lists the company's social accounts, uploads the image if one is given (an
// image post to every account) or else posts text (to the Facebook Pages),
// and polls the operation until the post is final, honouring Retry-After.
// Prints the final status and each target's permalink. Exits 1 unless the
// post was published.
import { readFile } from "node:fs/promises";
import { randomUUID } from "node:crypto";

const BASE = (process.env.SGW_BASE_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
const KEY = process.env.SGW_API_KEY;
const DEADLINE_MS = Number(process.env.SGW_DEADLINE_SECONDS ?? 120) * 1000;
const FINAL_OPERATION = new Set(["succeeded", "failed", "cancelled"]);

// An RFC 9457 problem from sgw, readable.
class ApiError extends Error {
  constructor(response, problem) {
    const lines = [`${response.status} ${problem.code ?? ""}: ${problem.detail ?? problem.title}`];
    for (const e of problem.errors ?? []) lines.push(`  ${e.field ?? ""} ${e.code ?? ""}: ${e.message ?? ""}`);
    if (problem.requestId) lines.push(`  (requestId ${problem.requestId})`);
    super(lines.join("\n"));
    this.status = response.status;
    this.retryAfter = response.headers.get("retry-after");
    this.problem = problem;
  }
}

async function call(method, path, { json, body, headers = {} } = {}) {
  const init = { method, headers: { "X-Api-Key": KEY, ...headers }, signal: AbortSignal.timeout(30_000) };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  const response = await fetch(BASE + path, init);
  if (response.status >= 400) {
    const text = await response.text();
    let problem;
    try { problem = JSON.parse(text); } catch { problem = { title: text.slice(0, 200) }; }
    throw new ApiError(response, problem);
  }
  return { response, value: response.status === 204 ? null : await response.json() };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Polls the operation with growing delays (Retry-After wins) until it is final.
async function follow(operationId) {
  const deadline = Date.now() + DEADLINE_MS;
  let delay = 500;
  for (;;) {
    let wait;
    try {
      const { response, value: operation } = await call("GET", `/api/v1/operations/${operationId}`);
      if (FINAL_OPERATION.has(operation.status)) return operation;
      wait = Number(response.headers.get("retry-after") ?? 0) * 1000 || delay;
      console.log(`operation ${operationId}: ${operation.status}`);
    } catch (e) {
      if (!(e instanceof ApiError) || ![429, 503].includes(e.status)) throw e;
      wait = Number(e.retryAfter ?? 0) * 1000 || delay;
      console.log(`sgw says ${e.status}; trying again in ${wait / 1000} s`);
    }
    if (Date.now() + wait > deadline) throw new Error(`gave up: operation ${operationId} not final in time`);
    await sleep(wait);
    delay = Math.min(delay * 2, 10_000);
  }
}

async function main() {
  if (!KEY) throw new Error("set SGW_API_KEY (and SGW_BASE_URL): see examples/README.md");
  const image = process.argv[2];

  const { value: list } = await call("GET", "/api/v1/social-accounts");
  const accounts = list.data.filter((a) => a.status === "active");
  for (const a of accounts) console.log(`account ${a.id}: ${a.platform} ${a.name}`);
  let targets, content, media = [];
  if (image) {
    const { value: upload } = await call("POST", "/api/v1/uploads",
      { body: await readFile(image), headers: { "Content-Type": "image/jpeg" } });
    console.log(`uploaded ${upload.uploadId}`);
    targets = accounts;
    content = { type: "image", message: "Hello from the Node example" };
    media = [{ source: "upload", uploadId: upload.uploadId }];
  } else {
    targets = accounts.filter((a) => a.platform === "facebook");
    content = { type: "text", message: "Hello from the Node example" };
  }
  if (targets.length === 0) throw new Error("no active account to post to (a text post needs a Facebook Page)");

  // One key per post: sending the same request again (after a timeout, say)
  // cannot publish twice.
  const { value: accepted } = await call("POST", "/api/v1/posts", {
    headers: { "Idempotency-Key": randomUUID() },
    json: {
      targets: targets.map((a) => ({ socialAccountId: a.id, platform: a.platform })),
      content, media, publishing: { mode: "immediate" },
    },
  });
  const postId = accepted.resource.postId;
  console.log(`post ${postId} accepted, operation ${accepted.operationId}`);

  await follow(accepted.operationId);
  const { value: post } = await call("GET", `/api/v1/posts/${postId}`);
  console.log(`final status: ${post.status}`);
  for (const t of post.targets) {
    const error = t.error ? ` error: ${t.error.code}: ${t.error.message}` : "";
    console.log(`target ${t.id} ${t.platform} ${t.status} permalink: ${t.permalinkUrl ?? "-"}${error}`);
  }
  return post.status === "published" ? 0 : 1;
}

main().then((code) => { process.exitCode = code; }, (e) => {
  console.error(e instanceof ApiError ? `sgw refused: ${e.message}` : `failed: ${e.message}${e.cause ? ` (${e.cause.message ?? e.cause})` : ""}`);
  process.exitCode = 2;
});
