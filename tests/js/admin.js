// Runs one kafkajs call against a replog cluster and prints its result as JSON.
// Usage: node admin.js '<json>' where json = {"brokers": [...], "action": "...", "args": {...}}
const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

async function main () {
  const { brokers, action, args } = JSON.parse(process.argv[2])
  const kafka = new Kafka({
    clientId: 'replog-kafkajs',
    brokers,
    logLevel: logLevel.ERROR,
    retry: { retries: 3 }
  })
  const admin = kafka.admin()
  await admin.connect()
  try {
    let result
    switch (action) {
      case 'describeCluster':
        result = await admin.describeCluster()
        break
      case 'fetchTopicOffsets':
        result = await admin.fetchTopicOffsets(args.topic)
        break
      case 'fetchTopicOffsetsByTimestamp':
        result = await admin.fetchTopicOffsetsByTimestamp(args.topic, args.timestamp)
        break
      case 'deleteTopicRecords':
        await admin.deleteTopicRecords({ topic: args.topic, partitions: args.partitions })
        result = await admin.fetchTopicOffsets(args.topic)
        break
      case 'describeConfigs':
        result = await admin.describeConfigs({
          includeSynonyms: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: args.topic, configNames: args.configNames }]
        })
        break
      case 'createTopics':
        result = await admin.createTopics({ topics: args.topics, waitForLeaders: true })
        break
      case 'fetchTopicMetadata':
        result = await admin.fetchTopicMetadata({ topics: args.topics })
        break
      case 'produce': {
        const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
        await producer.connect()
        result = await producer.send({ topic: args.topic, acks: -1, messages: args.messages })
        await producer.disconnect()
        break
      }
      case 'readCommitted': {
        // The first args.count records of args.topic that a read_committed consumer
        // (a member of args.groupId) is given.
        const consumer = kafka.consumer({
          groupId: args.groupId,
          readUncommitted: false,
          maxWaitTimeInMs: 100
        })
        await consumer.connect()
        const seen = []
        try {
          await consumer.subscribe({ topic: args.topic, fromBeginning: true })
          await new Promise((resolve, reject) => {
            const timer = setTimeout(() => reject(new Error(`readCommitted: ${seen.length} of ${args.count} records`)), 50000)
            consumer.run({
              eachMessage: async ({ partition, message }) => {
                seen.push({ partition, offset: Number(message.offset), value: message.value.toString() })
                if (seen.length >= args.count) { clearTimeout(timer); resolve() }
              }
            }).catch(reject)
          })
        } finally {
          await consumer.disconnect()
        }
        result = seen
        break
      }
      default:
        throw new Error(`unknown action ${action}`)
    }
    process.stdout.write(JSON.stringify(result === undefined ? null : result))
  } finally {
    await admin.disconnect()
  }
}

main().catch(err => {
  process.stderr.write(`${err.name}: ${err.message}\n`)
  process.exit(1)
})
