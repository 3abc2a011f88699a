'use strict'
// SASL login (KAFKAJS_SASL_* in the environment, see common.js): produce 100 keyed records to
// partition 0 and read them back with a group consumer; a refused login prints its error.
// Usage: node sasl.js <bootstrap> <topic> <group>
// Prints {records: [[offset, key, value], ...]} or {error: {name, type, message}}.
const { kafka, main, within } = require('./common')

const TOTAL = 100

main(async ([bootstrap, topic, group]) => {
  const client = kafka(bootstrap, `kafkajs-sasl-${group}`)
  const producer = client.producer({ allowAutoTopicCreation: false, retry: { retries: 0 } })
  try {
    await producer.connect()
  } catch (e) {
    return { error: { name: e.name, type: e.type || null, message: e.message } }
  }
  await producer.send({ topic, messages: Array.from({ length: TOTAL }, (_, i) => ({ key: `k${i}`, value: `v${i}`, partition: 0 })) })
  await producer.disconnect()
  const records = []
  const consumer = client.consumer({ groupId: group, maxWaitTimeInMs: 100, allowAutoTopicCreation: false })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      records.push([Number(message.offset), message.key.toString(), message.value.toString()])
    }
  })
  await within(30000, `${TOTAL} records`, () => records.length >= TOTAL)
  await consumer.disconnect()
  return { records }
})
