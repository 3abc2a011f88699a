'use strict'
// Fetch waits, with a group consumer parked at the log end of a topic that already holds records.
//   wake:     minBytes 1, maxWaitTimeInMs 5000: no empty fetch comes back while parked, and a
//             record produced then reaches eachMessage long before the 5 s wait ends.
//   minbytes: minBytes 4096, maxWaitTimeInMs 3000: a 10-byte record does not complete the
//             parked fetch (it arrives when the wait ends); 8 KiB do, at once.
// Usage: node wait.js <bootstrap> <topic> <group> <wake|minbytes>
const { kafka, main, within } = require('./common')

const PARK_MS = 1500
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function parkedConsumer (client, topic, group, minBytes, maxWaitTimeInMs) {
  const consumer = client.consumer({
    groupId: group, minBytes, maxWaitTimeInMs, heartbeatInterval: 1000, sessionTimeout: 10000,
    allowAutoTopicCreation: false
  })
  const me = { consumer, joined: false, fetchStarts: [], fetchesDone: 0, records: [] }
  consumer.on(consumer.events.GROUP_JOIN, () => { me.joined = true })
  consumer.on(consumer.events.FETCH_START, () => { if (me.joined) me.fetchStarts.push(Date.now()) })
  consumer.on(consumer.events.FETCH, () => { if (me.joined) me.fetchesDone += 1 })
  return (async () => {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: false })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        me.records.push([partition, Number(message.offset), message.value.length, Date.now()])
      }
    })
    await within(20000, 'the first fetch after joining', () => me.fetchStarts.length > 0)
    return me
  })()
}

async function deliver (producer, me, topic, value) {
  const seen = me.records.length
  const fetchStartedAt = me.fetchStarts[me.fetchStarts.length - 1]
  const sentAt = Date.now()
  await producer.send({ topic, messages: [{ value, partition: 0 }], acks: 1 })
  await within(10000, 'the record', () => me.records.length > seen)
  const [partition, offset, size, deliveredAt] = me.records[seen]
  return { record: [partition, offset, size], sinceSendMs: deliveredAt - sentAt,
    sinceFetchStartMs: deliveredAt - fetchStartedAt }
}

const MODES = {
  async wake (client, producer, topic, group) {
    const me = await parkedConsumer(client, topic, group, 1, 5000)
    const parkedAt = Date.now()
    const doneBefore = me.fetchesDone
    await sleep(PARK_MS)
    const fetchesWhileParked = me.fetchesDone - doneBefore
    const parkedMs = Date.now() - parkedAt
    return { parkedMs, fetchesWhileParked, ...(await deliver(producer, me, topic, 'wake-up')) }
  },

  async minbytes (client, producer, topic, group) {
    const me = await parkedConsumer(client, topic, group, 4096, 3000)
    await sleep(200)
    const small = await deliver(producer, me, topic, 'x'.repeat(10))
    await sleep(200)
    const large = await deliver(producer, me, topic, 'y'.repeat(8192))
    return { small, large }
  }
}

main(async ([bootstrap, topic, group, mode]) => {
  const client = kafka(bootstrap, `kafkajs-wait-${group}`)
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const out = await MODES[mode](client, producer, topic, group)
  // no consumer.disconnect(): it would wait out the next parked fetch (up to 5 s); the member
  // is simply dropped by the broker when its session expires
  await producer.disconnect()
  return out
})
