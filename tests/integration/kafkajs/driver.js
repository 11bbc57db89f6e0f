// Drive KafkaJS (an unmodified Kafka client) against a broker, for the Python
// integration tests in ../test_kafkajs.py. Keys, values and header values travel as
// base64 in JSON lines so any bytes survive.
//
//   node driver.js produce  <bootstrap> <topic> <codec> <idempotent 0|1>   (records on stdin)
//   node driver.js consume  <bootstrap> <topic> <group> <count> <timeout_s>
//   node driver.js member   <bootstrap> <topic> <group>                  (until stdin closes)
//   node driver.js admin    <bootstrap> <topic>
//   node driver.js txn      <bootstrap> <transactional id>   (one transaction per stdin line)
//   node driver.js readtxn  <bootstrap> <topic> <group> <read_uncommitted 0|1> <count> <timeout_s>
//
// txn: each stdin line is {"send": [{"topic", "partition", "v"}], "offsets": null or
// {"group", "topic", "partition", "offset"}, "commit": true|false}; it is sent in one
// transaction, then committed or aborted; prints {"txn": i, "committed": bool} each.
// readtxn: a group consumer with `readUncommitted`; prints each record as consume does,
// waits 2 s past the `count`-th for records that should not be there, then {"done": n}.
//
// Each prints JSON lines on stdout; the last line of a successful run is {"done": ...}.
// Any error exits with status 1 and the error on stderr.
'use strict'
const readline = require('readline')
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }
const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = (s) => (s === null ? null : Buffer.from(s, 'base64'))
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

// KAFKAJS_SECURITY (JSON, optional): {"ca": path, "cert": path, "key": path,
// "sasl": {"mechanism": "scram-sha-512", "username": ..., "password": ...} or
// {"mechanism": "oauthbearer", "token": ...}}; with a CA
// the connection is TLS (SSL or SASL_SSL), with "sasl" it logs in.
function security () {
  const raw = process.env.KAFKAJS_SECURITY
  if (!raw) return {}
  const sec = JSON.parse(raw)
  const fs = require('fs')
  const out = {}
  if (sec.ca) {
    out.ssl = { ca: [fs.readFileSync(sec.ca, 'utf-8')] }
    if (sec.cert) {
      out.ssl.cert = fs.readFileSync(sec.cert, 'utf-8')
      out.ssl.key = fs.readFileSync(sec.key, 'utf-8')
    }
  }
  if (sec.sasl) out.sasl = sec.sasl
  // {"mechanism": "oauthbearer", "token": jwt}: KafkaJS asks its oauthBearerProvider for
  // the token at each (re-)authentication; the test hands it one it signed itself
  if (sec.sasl && sec.sasl.mechanism === 'oauthbearer') {
    const token = sec.sasl.token
    out.sasl = { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) }
  }
  return out
}

function client (bootstrap, id) {
  return new Kafka({
    clientId: id,
    brokers: [bootstrap],
    logLevel: logLevel.ERROR,
    retry: { retries: 8 },
    ...security()
  })
}

async function readRecords () {
  const recs = []
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    if (!line) continue
    const r = JSON.parse(line)
    const headers = {}
    for (const [name, value] of r.h) headers[name] = unb64(value)
    recs.push({ key: unb64(r.k), value: unb64(r.v), headers })
  }
  return recs
}

async function produce (bootstrap, topic, codec, idempotent) {
  const recs = await readRecords()
  const producer = client(bootstrap, 'kafkajs-producer').producer({
    idempotent: idempotent === '1',
    maxInFlightRequests: idempotent === '1' ? 1 : 5,
    allowAutoTopicCreation: false
  })
  await producer.connect()
  let sent = 0
  for (let i = 0; i < recs.length; i += 500) {
    const res = await producer.send({
      topic, acks: -1, compression: CODECS[codec], messages: recs.slice(i, i + 500)
    })
    for (const r of res) if (r.errorCode !== 0) throw new Error(`produce error ${r.errorCode}`)
    sent += Math.min(500, recs.length - i)
  }
  await producer.disconnect()
  out({ done: sent })
}

async function consume (bootstrap, topic, group, count, timeoutS) {
  const consumer = client(bootstrap, 'kafkajs-consumer').consumer({ groupId: group })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let n = 0
  const want = Number(count)
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${n} records`)),
      Number(timeoutS) * 1000)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = Object.entries(message.headers || {}).map(([k, v]) => [k, b64(v)])
        out({
          p: partition, o: Number(message.offset), t: Number(message.timestamp),
          k: b64(message.key), v: b64(message.value), h: headers
        })
        if (++n === want) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect() // commits the consumed offsets
  out({ done: n })
}

async function member (bootstrap, topic, group) {
  const consumer = client(bootstrap, 'kafkajs-member').consumer({
    groupId: group, sessionTimeoutMs: 10000, heartbeatInterval: 500
  })
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    out({ member: e.payload.memberId, leader: e.payload.isLeader, assignment: e.payload.memberAssignment })
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ eachMessage: async () => {} })
  const rl = readline.createInterface({ input: process.stdin })
  for await (const _ of rl) { /* wait for stdin to close */ }
  await consumer.disconnect()
  out({ done: true })
}

async function admin (bootstrap, topic) {
  const a = client(bootstrap, 'kafkajs-admin').admin()
  await a.connect()
  out({ created: await a.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] }], waitForLeaders: true }) })
  out({ createdAgain: await a.createTopics({ topics: [{ topic, numPartitions: 2 }] }) })
  out({ listed: (await a.listTopics()).includes(topic) })
  await a.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
  const meta = await a.fetchTopicMetadata({ topics: [topic] })
  out({ partitions: meta.topics[0].partitions.length })
  const cfg = await a.describeConfigs({ includeSynonyms: false, resources: [{ type: 2, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }] })
  out({ configs: Object.fromEntries(cfg.resources[0].configEntries.map((e) => [e.configName, e.configValue])) })
  await a.alterConfigs({ resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }] })
  const cfg2 = await a.describeConfigs({ includeSynonyms: false, resources: [{ type: 2, name: topic, configNames: ['retention.ms'] }] })
  out({ altered: cfg2.resources[0].configEntries[0].configValue })
  out({ offsets: await a.fetchTopicOffsets(topic) })
  const cluster = await a.describeCluster()
  out({ brokers: cluster.brokers.length, controller: cluster.controller })
  await a.deleteTopics({ topics: [topic] })
  out({ deleted: !(await a.listTopics()).includes(topic) })
  await a.disconnect()
  out({ done: true })
}

async function txn (bootstrap, transactionalId) {
  const producer = client(bootstrap, 'kafkajs-txn').producer({
    transactionalId, maxInFlightRequests: 1, idempotent: true, allowAutoTopicCreation: false
  })
  await producer.connect()
  let i = 0
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    if (!line) continue
    const spec = JSON.parse(line)
    const t = await producer.transaction()
    for (const r of spec.send) {
      await t.send({ topic: r.topic, messages: [{ partition: r.partition, value: unb64(r.v) }] })
    }
    if (spec.offsets) {
      const o = spec.offsets
      await t.sendOffsets({
        consumerGroupId: o.group,
        topics: [{ topic: o.topic, partitions: [{ partition: o.partition, offset: String(o.offset) }] }]
      })
    }
    if (spec.commit) await t.commit()
    else await t.abort()
    out({ txn: i++, committed: spec.commit })
  }
  await producer.disconnect()
  out({ done: i })
}

async function readtxn (bootstrap, topic, group, readUncommitted, count, timeoutS) {
  const consumer = client(bootstrap, 'kafkajs-readtxn').consumer({
    groupId: group, readUncommitted: readUncommitted === '1', maxWaitTimeInMs: 500
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  let n = 0
  const want = Number(count)
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${n} records`)),
      Number(timeoutS) * 1000)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        out({ p: partition, o: Number(message.offset), v: b64(message.value) })
        if (++n === want) { clearTimeout(timer); setTimeout(resolve, 2000) }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  out({ done: n })
}

const [cmd, ...args] = process.argv.slice(2)
const commands = { produce, consume, member, admin, txn, readtxn }
if (!commands[cmd]) {
  console.error(`unknown command ${cmd}; expected one of ${Object.keys(commands).join(', ')}`)
  process.exit(2)
}
// process.exit() does not wait for queued writes to a pipe: exit once stdout drained.
const exit = (code) => process.stdout.write('', () => process.exit(code))
commands[cmd](...args).then(() => exit(0)).catch((e) => {
  console.error(e && e.stack ? e.stack : e)
  exit(1)
})
