// Consumes a topic in a consumer group with kafkajs and prints what it read as JSON.
// Usage: node group.js '<json>' where json = {"brokers": [...], "group": "...",
//        "topic": "...", "count": N} — reads N records (committing each batch it read), then
//        disconnects (LeaveGroup) and prints {"values": [...]}.
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const { brokers, group, topic, count } = JSON.parse(process.argv[2])
  const kafka = new Kafka({ clientId: 'replog-kafkajs', brokers, logLevel: logLevel.ERROR })
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  let finish
  const done = new Promise(resolve => { finish = resolve })
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      let next = null
      for (const message of batch.messages) {
        if (values.length >= count) break
        values.push(message.value.toString())
        resolveOffset(message.offset)
        next = (BigInt(message.offset) + 1n).toString()
      }
      if (next !== null) {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }])
      }
      if (values.length >= count) finish()
    }
  })
  await done
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ values }))
}

main().catch(err => { process.stderr.write(String(err && err.stack || err)); process.exit(1) })
