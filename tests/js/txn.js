'use strict'
// Transactional consume-transform-produce: a read_committed group member reads <count> records
// of <in>; each one becomes, in its own transaction, its upper-cased value on <out> (same
// partition) plus the consumed offset sent with sendOffsets. First one transaction is aborted
// (its record must never be seen by a read_committed reader).
// Usage: node txn.js <bootstrap> <in> <out> <group> <count>
// Prints {"processed": n, "aborted": 1}.
const { kafka, main, within } = require('./common')

main(async ([bootstrap, topicIn, topicOut, group, count]) => {
  const client = kafka(bootstrap, `kafkajs-txn-${group}`)
  const producer = client.producer({
    transactionalId: `kafkajs-tid-${group}`, idempotent: true, maxInFlightRequests: 1
  })
  await producer.connect()
  const aborting = await producer.transaction()
  await aborting.send({ topic: topicOut, messages: [{ value: 'ABORTED', partition: 0 }] })
  await aborting.abort()
  const consumer = client.consumer({ groupId: group, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic: topicIn, fromBeginning: true })
  let processed = 0
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const txn = await producer.transaction()
      try {
        await txn.send({
          topic: topicOut,
          messages: [{ value: message.value.toString().toUpperCase(), partition }]
        })
        await txn.sendOffsets({
          consumerGroupId: group,
          topics: [{ topic, partitions: [{ partition, offset: (BigInt(message.offset) + 1n).toString() }] }]
        })
        await txn.commit()
      } catch (e) {
        await txn.abort()
        throw e
      }
      processed += 1
    }
  })
  await within(45000, `${count} records processed`, () => processed >= Number(count))
  await consumer.disconnect()
  await producer.disconnect()
  return { processed, aborted: 1 }
})
