// Receive sgw's events and verify their Standard Webhooks signatures.
//
//   SGW_WEBHOOK_SECRET=whsec_... node verify_webhook.mjs [port]      (default port 8765)
//
// Give the client the webhook URL http://<this host>:<port>/hook (sgw client
// create --webhook-url, or the workspace). Each event whose signature checks
// out is answered 204 and printed as "verified <type> <id>"; anything else is
// refused with 400 and printed as "refused: <reason>". The standardwebhooks
// package does the check: HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>",
// compared in constant time, with a timestamp at most five minutes from now.
import { createServer } from "node:http";
import { Webhook } from "standardwebhooks";

const MAX_BODY = 1024 * 1024;
const secret = process.env.SGW_WEBHOOK_SECRET ?? "";
if (!secret.startsWith("whsec_")) {
  console.error("set SGW_WEBHOOK_SECRET to the client's whsec_ secret: see examples/README.md");
  process.exit(2);
}
const webhook = new Webhook(secret);
const port = Number(process.argv[2] ?? 8765);

const server = createServer((req, res) => {
  const answer = (status, text = "") => {
    res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8" }).end(text);
  };
  if (req.method !== "POST") return answer(405, "POST only\n");
  const chunks = [];
  let size = 0;
  req.on("data", (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) req.destroy();
    else chunks.push(chunk);
  });
  req.on("end", () => {
    // The signature covers the exact bytes sent: verify them before parsing.
    const body = Buffer.concat(chunks).toString("utf8");
    let event;
    try {
      event = webhook.verify(body, {
        "webhook-id": req.headers["webhook-id"],
        "webhook-timestamp": req.headers["webhook-timestamp"],
        "webhook-signature": req.headers["webhook-signature"],
      });
    } catch (e) {
      console.log(`refused: ${e.message}`);
      return answer(400, `${e.message}\n`);
    }
    console.log(`verified ${event.type} ${event.id}`);
    answer(204);
  });
});

server.listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${port}/hook`));
