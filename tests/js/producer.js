'use strict'
// Producer: <count> keyed records with headers to a 3-partition topic, one send() per batch of
// 100, with the given acks and compression; optionally idempotent (acks must then be -1).
// Usage: node producer.js <bootstrap> <topic> <count> <acks> <none|gzip> <idempotent:0|1>
// Prints the RecordMetadata of every send: [partition, errorCode, baseOffset] in send order
// (none with acks 0: kafkajs resolves those sends without a response).
const { CompressionTypes } = require('kafkajs')
const { kafka, main } = require('./common')

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

main(async ([bootstrap, topic, count, acks, compression, idempotent]) => {
  const producer = kafka(bootstrap, `kafkajs-producer-${topic}`).producer({
    idempotent: idempotent === '1', allowAutoTopicCreation: false
  })
  await producer.connect()
  const results = []
  try {
    const n = Number(count)
    for (let start = 0; start < n; start += 100) {
      const messages = []
      for (let i = start; i < Math.min(n, start + 100); i++) {
        messages.push({
          key: `k-${i % 37}`,
          value: `v-${i}`,
          partition: i % 3,
          headers: { seq: `${i}`, kind: i % 2 ? 'odd' : 'even' }
        })
      }
      const meta = await producer.send({
        topic, messages, acks: Number(acks), timeout: 10000, compression: CODECS[compression]
      })
      for (const m of meta) results.push([m.partition, m.errorCode, m.baseOffset])
    }
  } finally {
    await producer.disconnect()
  }
  return results
})
