// Node's own http client on one kept-alive socket: HEAD / (an unknown path's 404), HEAD /health,
// then GET /health. A HEAD answer with a body would make the parser read that body as the next
// response's status line (HPE_INVALID_CONSTANT), as a Node-based proxy or health probe in front
// of the daemon would. Usage: node head_keepalive.mjs ORIGIN. Exits non-zero on failure.
import http from "node:http";
import assert from "node:assert/strict";

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function request(method, path) {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, process.argv[2]), { method, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ res, body, reused: req.reusedSocket }));
      res.on("error", reject);
    });
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
    req.on("error", reject);
    req.end();
  });
}

const root = await request("HEAD", "/");
assert.equal(root.res.statusCode, 404);
assert.equal(root.body, "");
assert.ok(Number(root.res.headers["content-length"]) > 0, "HEAD / says how long GET's body is");

const head = await request("HEAD", "/health");
assert.equal(head.reused, true, "HEAD /health on the socket HEAD / used");
assert.equal(head.body, "");

const get = await request("GET", "/health");
assert.equal(get.reused, true, "GET /health on the same socket");
assert.equal(get.res.statusCode, head.res.statusCode);
assert.equal(get.res.headers["content-length"], head.res.headers["content-length"]);
assert.ok(JSON.parse(get.body).status, get.body);

agent.destroy();
console.log("head keep-alive: ok");
