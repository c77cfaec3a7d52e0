// A ragline chat backend in JavaScript: questions go to the query pool as Celery tasks (celery-node),
// replies are JSON (docs/schemas/). Nothing of ragline is imported: the contract is the task name,
// the queue and the JSON payload (docs/schemas/README.md, "Producers in other languages").
//
//   REDIS_URL=redis://chat:PASSWORD@127.0.0.1:6379/0 node chat_backend.js          # HTTP on PORT (8080)
//   curl -s localhost:8080/ask -d '{"question": "...", "tenant": "acme", "groups": ["staff"]}'
//   REDIS_URL=... node chat_backend.js ask "question" --tenant acme --groups staff   # one call, JSON out
//
// Errors map as the Python clients' do: a structured error reply of the worker (`{"ok": false,
// "error": ...}`) to 429 (rate limited, with Retry-After), 504 (deadline / retrieval timeout, or no
// worker answered in time), 400 (invalid payload) or 500; no REDIS_URL to 503.
// On a stack with message signing (RAGLINE_OPS_SIGNING_*) this backend cannot be a producer: celery-node
// sends unsigned JSON, which the workers refuse.

"use strict";

const http = require("node:http");
const { randomUUID } = require("node:crypto");
const celery = require("celery-node");

const TASKS = { ask: "ragline.query.ask", search: "ragline.query.retrieve" };
const QUEUE = "query";
const TIMEOUT_S = Number(process.env.RAGLINE_TIMEOUT_S || 60);
const TYPED = { "rate limited": 429, "deadline exceeded": 504, "retrieval timeout": 504, "invalid payload": 400 };

class RaglineError extends Error {
  constructor(status, reply) {
    super(reply.error || "error");
    this.status = status;
    this.reply = reply;
  }
}

function connect(redisUrl) {
  if (!redisUrl) {
    throw new RaglineError(503, {
      ok: false,
      error: "unavailable",
      detail: { message: "set REDIS_URL to the stack's broker (`ragline secrets show redis-chat` prints its password)" },
    });
  }
  const url = withUser(redisUrl);
  const client = celery.createClient(url, url, QUEUE);
  // ioredis's ready check runs INFO, which a producer's user may not (it describes the whole server)
  client.conf.CELERY_BROKER_OPTIONS = { enableReadyCheck: false };
  client.conf.CELERY_BACKEND_OPTIONS = { enableReadyCheck: false };
  return client;
}

// celery-node's ioredis 4 logs in as Redis's default user, ignoring the URL's user, unless the URL
// allows it: with users per component that login is refused.
function withUser(redisUrl) {
  const url = new URL(redisUrl);
  if (url.username && !url.searchParams.has("allowUsernameInURI")) {
    url.searchParams.set("allowUsernameInURI", "true");
  }
  return url.toString();
}

// With Redis users per component (the embedded stack's; docs/operations.md, "Redis users per
// component") a chat backend logs in as `chat` (`ragline secrets show redis-chat`): its key patterns
// admit only the results of task ids that start with `chat-`, as RaglineClient names them.
const PREFIXED_USERS = new Set(["chat", "relay"]);

function newTaskId(redisUrl) {
  const user = decodeURIComponent(new URL(redisUrl).username || "");
  return PREFIXED_USERS.has(user) ? `${user}-${randomUUID()}` : randomUUID();
}

// A reply read is deleted in the same command: a producer's user may GETDEL its replies, never DEL
// (that would let it delete a queue). DEL only where Redis is older than 6.2 and has no GETDEL.
async function forget(redis, key) {
  try {
    await redis.call("GETDEL", key);
  } catch (err) {
    if (/unknown command/i.test(err.message)) await redis.del(key);
  }
}

// One task to the query pool and its reply, read once and deleted (as RaglineClient does). The
// message expires when the wait ends: a pool back from an outage skips questions nobody waits for.
async function call(client, kind, payload, timeoutS = TIMEOUT_S) {
  const taskId = newTaskId(client.conf.CELERY_BACKEND);
  const message = client.createTaskMessage.call(client, taskId, TASKS[kind], [payload], {});
  message.headers.expires = new Date(Date.now() + timeoutS * 1000).toISOString();
  client.sendTaskMessage(TASKS[kind], message);
  let reply;
  try {
    reply = await client.asyncResult(taskId).get(timeoutS * 1000, 100);
  } catch (err) {
    if (err.message === "TIMEOUT") {
      throw new RaglineError(504, { ok: false, error: "timeout", detail: { task: TASKS[kind], timeout_s: timeoutS } });
    }
    throw new RaglineError(500, { ok: false, error: "internal error", detail: { message: err.message } });
  } finally {
    await forget(client.backend.redis, `celery-task-meta-${taskId}`).catch(() => {});
  }
  if (reply && reply.ok === false) {
    throw new RaglineError(TYPED[reply.error] || 500, reply);
  }
  return { taskId, reply };
}

// The request payloads of docs/schemas/ask_request.json and search_request.json.
function payloadFor(kind, body) {
  const payload = { query: body.question ?? body.query ?? "", tenant: body.tenant, groups: body.groups || [] };
  for (const key of ["k", "mode", "layers", "path_prefixes", "history"]) {
    if (body[key] !== undefined) payload[key] = body[key];
  }
  return payload;
}

function parseArgs(argv) {
  const [kind, question, ...rest] = argv;
  const body = { question };
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, "");
    const value = rest[i + 1];
    body[key] = key === "groups" ? value.split(",").filter(Boolean) : key === "k" ? Number(value) : value;
  }
  return { kind, body };
}

async function once(argv) {
  const { kind, body } = parseArgs(argv);
  const client = connect(process.env.REDIS_URL);
  try {
    const { taskId, reply } = await call(client, kind, payloadFor(kind, body));
    process.stdout.write(JSON.stringify({ status: 200, task_id: taskId, reply }) + "\n");
    return 0;
  } catch (err) {
    if (!(err instanceof RaglineError)) throw err;
    process.stdout.write(JSON.stringify({ status: err.status, reply: err.reply }) + "\n");
    return 1;
  } finally {
    await client.disconnect().catch(() => {});
  }
}

function serve(port) {
  const client = connect(process.env.REDIS_URL);
  const server = http.createServer((req, res) => {
    const kind = req.url.replace(/^\//, "");
    if (req.method !== "POST" || !TASKS[kind]) {
      res.writeHead(404).end();
      return;
    }
    let data = "";
    req.on("data", (chunk) => (data += chunk));
    req.on("end", async () => {
      let status = 200;
      let out;
      const headers = { "content-type": "application/json" };
      try {
        out = (await call(client, kind, payloadFor(kind, JSON.parse(data || "{}")))).reply;
      } catch (err) {
        status = err instanceof RaglineError ? err.status : 400;
        out = err instanceof RaglineError ? err.reply : { ok: false, error: "malformed", detail: err.message };
        const after = out.detail && out.detail.retry_after_s;
        if (status === 429 && after) headers["retry-after"] = String(Math.ceil(after));
      }
      res.writeHead(status, headers).end(JSON.stringify(out));
    });
  });
  server.listen(port, "127.0.0.1");
  return server;
}

if (require.main === module) {
  const argv = process.argv.slice(2);
  if (TASKS[argv[0]]) {
    once(argv).then((code) => process.exit(code), (err) => {
      process.stderr.write(`${err.stack || err}\n`);
      process.exit(2);
    });
  } else {
    serve(Number(process.env.PORT || 8080));
  }
}

module.exports = { call, connect, payloadFor, serve };
