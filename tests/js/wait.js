'use strict'
// Fetch waits: a group consumer (minBytes 1, maxWaitTimeInMs 5000) parked at the log end of a
// topic that already holds records gets no empty fetch back while parked (the broker holds the
// fetch), and a record produced then reaches eachMessage long before the 5 s wait ends.
// Usage: node wait.js <bootstrap> <topic> <group>
// Prints {parkedMs, fetchesWhileParked, latencyMs, records}.
const { kafka, main, within } = require('./common')

const MAX_WAIT_MS = 5000
const PARK_MS = 1500

main(async ([bootstrap, topic, group]) => {
  const client = kafka(bootstrap, `kafkajs-wait-${group}`)
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const consumer = client.consumer({
    groupId: group, minBytes: 1, maxWaitTimeInMs: MAX_WAIT_MS, heartbeatInterval: 1000,
    sessionTimeout: 10000, allowAutoTopicCreation: false
  })
  let joined = false
  let fetchStarts = 0
  let fetchesDone = 0
  const records = []
  let deliveredAt = null
  consumer.on(consumer.events.GROUP_JOIN, () => { joined = true })
  consumer.on(consumer.events.FETCH_START, () => { if (joined) fetchStarts += 1 })
  consumer.on(consumer.events.FETCH, () => { if (joined) fetchesDone += 1 })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: false })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      deliveredAt = deliveredAt || Date.now()
      records.push([partition, Number(message.offset), message.value.toString()])
    }
  })
  await within(20000, 'the first fetch after joining', () => fetchStarts > 0)
  const parkedAt = Date.now()
  const doneBefore = fetchesDone
  await new Promise((resolve) => setTimeout(resolve, PARK_MS))
  const fetchesWhileParked = fetchesDone - doneBefore
  const sentAt = Date.now()
  await producer.send({ topic, messages: [{ value: 'wake-up', partition: 0 }], acks: 1 })
  await within(MAX_WAIT_MS * 2, 'the woken record', () => records.length > 0)
  const out = { parkedMs: sentAt - parkedAt, fetchesWhileParked, latencyMs: deliveredAt - sentAt, records }
  // no consumer.disconnect(): it would wait out the next parked fetch (up to 5 s); the member
  // is simply dropped by the broker when its session expires
  await producer.disconnect()
  return out
})
