// grpc-js's own retries, for tests/unit/test_grpc_js.py to compare the lab's gRPC adapter with.
//
// Reads one JSON document on stdin:
//   serviceConfig   the service config the client channel is given (its retryPolicy and
//                   retryThrottling are what is under test; names are set here)
//   randoms         the numbers grpc-js's retry jitter draws, in order (Math.random, seeded by
//                   the test); every other use of Math.random in the library keeps its own
//   calls           per call, the status each of its attempts gets from the server, by name
//                   ("OK", "UNAVAILABLE", ...); a call's last status repeats if it makes more
//   attemptsLimit   the client's cap on maxAttempts (grpc-js's default is 5, as A6's)
// The calls run one after another against a server on 127.0.0.1 in this process. Prints one JSON
// document: per call, the attempts the server saw, the status the caller got, the backoff grpc-js
// asked for before each retry (ms) and the gaps the server saw between attempts (ms).
'use strict';
const fs = require('fs');
const grpc = require('@grpc/grpc-js');

const input = JSON.parse(fs.readFileSync(0, 'utf8'));
const METHOD = '/stormlab.Membership/Renew';
const bytes = { serialize: (b) => b, deserialize: (b) => b };

const randoms = input.randoms.slice();
let draws = 0;
const ownRandom = Math.random;
Math.random = function () {
  if (!new Error().stack.includes('getNextRetryJitter')) return ownRandom();
  if (randoms.length === 0) throw new Error('grpc-js drew more jitter than the test gave');
  draws += 1;
  return randoms.shift();
};

let current = null; // the call being made: its script, attempts and their times
const ownSetTimeout = global.setTimeout;
global.setTimeout = function (fn, ms, ...rest) {
  if (current && new Error().stack.includes('maybeRetryCall')) current.delays_ms.push(ms);
  return ownSetTimeout(fn, ms, ...rest);
};

function renew(call, callback) {
  const now = process.hrtime.bigint();
  current.seen.push(now);
  const script = current.script;
  const name = script[Math.min(current.seen.length, script.length) - 1];
  if (name === 'OK') callback(null, Buffer.alloc(0));
  else callback({ code: grpc.status[name], details: 'scripted ' + name });
}

function named(config) {
  const methodConfig = (config.methodConfig || []).map((m) => ({ ...m, name: [{ service: 'stormlab.Membership' }] }));
  return { ...config, methodConfig };
}

async function main() {
  const server = new grpc.Server();
  const service = { Renew: { path: METHOD, requestStream: false, responseStream: false,
    requestSerialize: bytes.serialize, requestDeserialize: bytes.deserialize,
    responseSerialize: bytes.serialize, responseDeserialize: bytes.deserialize } };
  server.addService(service, { Renew: renew });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  const options = { 'grpc.service_config': JSON.stringify(named(input.serviceConfig)) };
  if (input.attemptsLimit) options['grpc-node.retry_max_attempts_limit'] = input.attemptsLimit;
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), options);
  const out = [];
  for (const script of input.calls) {
    current = { script, seen: [], delays_ms: [] };
    const code = await new Promise((resolve) =>
      client.makeUnaryRequest(METHOD, bytes.serialize, bytes.deserialize, Buffer.alloc(0), (err) => resolve(err ? err.code : 0)));
    const gaps = current.seen.slice(1).map((t, i) => Number(t - current.seen[i]) / 1e6);
    out.push({ attempts: current.seen.length, status: grpc.status[code], delays_ms: current.delays_ms, gaps_ms: gaps });
  }
  current = null;
  client.close();
  server.forceShutdown();
  process.stdout.write(JSON.stringify({ calls: out, draws, version: require('@grpc/grpc-js/package.json').version }) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
