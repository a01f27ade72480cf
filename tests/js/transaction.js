// Runs kafkajs transactions and prints what they did as JSON.
// Usage: node transaction.js '<json>' where json = {"brokers": [...], "transactionalId": "...",
//        "topic": "...", "commit": [values], "abort": [values]} — one transaction sending
//        `commit` (committed), then one sending `abort` (aborted); prints {"done": true}.
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const { brokers, transactionalId, topic, commit, abort } = JSON.parse(process.argv[2])
  const kafka = new Kafka({ clientId: 'replog-kafkajs', brokers, logLevel: logLevel.ERROR })
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  try {
    let txn = await producer.transaction()
    await txn.send({ topic, messages: commit.map(value => ({ value, partition: 0 })) })
    await txn.commit()
    txn = await producer.transaction()
    await txn.send({ topic, messages: abort.map(value => ({ value, partition: 1 })) })
    await txn.abort()
  } finally {
    await producer.disconnect()
  }
  process.stdout.write(JSON.stringify({ done: true }))
}

main().catch(err => { process.stderr.write(String(err && err.stack || err)); process.exit(1) })
