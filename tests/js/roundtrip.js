'use strict'
// Produce then consume one partition through small fetches: 50 records sent one by one (one
// batch each), one 200 KB record (larger than the fetch limits, which must not stall), 20 in one
// GZIP batch; the group consumer fetches with maxBytesPerPartition 1000 / maxBytes 2000, so
// the broker's responses end in partial batches. KAFKAJS_SSL_CA=<pem> connects with TLS.
// Usage: node roundtrip.js <bootstrap> <topic> <group>
// Prints [offset, key, value length, first 8 characters of the value] of each record read.
const { CompressionTypes } = require('kafkajs')
const { kafka, main, within } = require('./common')

const TOTAL = 71

main(async ([bootstrap, topic, group]) => {
  const client = kafka(bootstrap, `kafkajs-roundtrip-${group}`)
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  for (let i = 0; i < 50; i++) {
    await producer.send({ topic, messages: [{ key: `k${i}`, value: `v${i}-` + 'x'.repeat(300), partition: 0 }] })
  }
  await producer.send({ topic, messages: [{ key: 'big', value: 'B'.repeat(200000), partition: 0 }] })
  await producer.send({ topic, compression: CompressionTypes.GZIP,
    messages: Array.from({ length: 20 }, (_, i) => ({ key: `g${i}`, value: `gzip-${i}`, partition: 0 })) })
  await producer.disconnect()

  const records = []
  const consumer = client.consumer({ groupId: group, maxBytesPerPartition: 1000, maxBytes: 2000,
    maxWaitTimeInMs: 100, allowAutoTopicCreation: false })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      const value = message.value.toString()
      records.push([Number(message.offset), message.key.toString(), value.length, value.slice(0, 8)])
    }
  })
  await within(20000, `${TOTAL} records`, () => records.length >= TOTAL)
  await consumer.disconnect()
  return records
})
