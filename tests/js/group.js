'use strict'
// Consumer groups, in three phases run one after the other on the same topic and group:
//   split <count>:  two consumers join, split the partitions; <count> records are produced only
//                   then; both read until the union is complete, commit, describe, leave.
//   resume <count>: <count> more records; one consumer (fromBeginning, so only the committed
//                   offsets keep it from re-reading) reads them, commits, leaves.
//   admin <count>:  on the empty group: fetchOffsets, describeGroups, listGroups,
//                   resetOffsets(earliest), fetchOffsets; then a consumer re-reads all <count>.
// Usage: node group.js <bootstrap> <topic> <group> <phase> [count] [first]
// Record i goes to partition i % partitions with key k-i, value v-i, headers {i, src}; the split
// phase sends them GZIP-compressed, the resume phase uncompressed.
const { AssignerProtocol, CompressionTypes } = require('kafkajs')
const { kafka, main, within } = require('./common')

async function produce (client, topic, partitions, first, count, compression) {
  const producer = client.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const messages = []
  for (let i = first; i < first + count; i++) {
    messages.push({ key: `k-${i}`, value: `v-${i}`, partition: i % partitions,
      headers: { i: `${i}`, src: 'kafkajs' } })
  }
  await producer.send({ topic, messages, acks: -1, compression })
  await producer.disconnect()
}

function startConsumer (client, topic, group, name, state) {
  const consumer = client.consumer({
    groupId: group, sessionTimeout: 6000, rebalanceTimeout: 10000, heartbeatInterval: 200,
    maxWaitTimeInMs: 200, allowAutoTopicCreation: false
  })
  const me = { name, consumer, assignment: null, records: [] }
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    me.assignment = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  })
  return (async () => {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const headers = {}
        for (const [k, v] of Object.entries(message.headers)) headers[k] = v.toString()
        me.records.push([partition, Number(message.offset), message.key.toString(),
          message.value.toString(), headers])
        state.total += 1
      }
    })
    return me
  })()
}

async function commitAll (me, topic) {
  const last = {}
  for (const [partition, offset] of me.records) last[partition] = offset
  const offsets = Object.entries(last).map(([p, o]) => ({ topic, partition: Number(p),
    offset: String(o + 1) }))
  await me.consumer.commitOffsets(offsets)
  return offsets.map((o) => [o.partition, Number(o.offset)])
}

function describe (groups) {
  return groups.map((g) => ({
    groupId: g.groupId, state: g.state, protocolType: g.protocolType, protocol: g.protocol,
    errorCode: g.errorCode,
    members: g.members.map((m) => {
      const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)
      return { clientId: m.clientId, assignment: a && a.assignment }
    }).sort((x, y) => JSON.stringify(x.assignment) < JSON.stringify(y.assignment) ? -1 : 1)
  }))
}

async function fetchOffsets (admin, group, topic) {
  const res = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  return res[0].partitions.map((p) => [p.partition, Number(p.offset)]).sort((a, b) => a[0] - b[0])
}

const PHASES = {
  async split (client, topic, group, count, first) {
    const admin = client.admin()
    await admin.connect()
    const meta = await admin.fetchTopicMetadata({ topics: [topic] })
    const partitions = meta.topics[0].partitions.length
    const state = { total: 0 }
    const members = [await startConsumer(client, topic, group, 'a', state),
      await startConsumer(client, topic, group, 'b', state)]
    // produce only once the two hold disjoint halves: then nothing is read twice
    await within(20000, 'a stable split', () => members.every((m) => m.assignment &&
      m.assignment.length === partitions / 2) &&
      new Set([...members[0].assignment, ...members[1].assignment]).size === partitions)
    await produce(client, topic, partitions, first, count, CompressionTypes.GZIP)
    await within(20000, `${count} records`, () => state.total >= count)
    const out = { partitions }
    out.described = describe((await admin.describeGroups([group])).groups)
    for (const m of members) {
      out[m.name] = { assignment: m.assignment, records: m.records,
        committed: await commitAll(m, topic) }
    }
    for (const m of members) await m.consumer.disconnect()
    await admin.disconnect()
    return out
  },

  async resume (client, topic, group, count, first) {
    const admin = client.admin()
    await admin.connect()
    const partitions = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length
    await produce(client, topic, partitions, first, count, CompressionTypes.None)
    const state = { total: 0 }
    const me = await startConsumer(client, topic, group, 'c', state)
    await within(20000, `${count} records`, () => state.total >= count)
    const out = { assignment: me.assignment, records: me.records, committed: await commitAll(me, topic) }
    await me.consumer.disconnect()
    await admin.disconnect()
    return out
  },

  async admin (client, topic, group, count) {
    const admin = client.admin()
    await admin.connect()
    const out = {}
    out.offsets = await fetchOffsets(admin, group, topic)
    out.described = describe((await admin.describeGroups([group])).groups)
    out.listed = (await admin.listGroups()).groups.filter((g) => g.groupId === group)
    await admin.resetOffsets({ groupId: group, topic, earliest: true })
    out.offsetsAfterReset = await fetchOffsets(admin, group, topic)
    out.describedAfterReset = describe((await admin.describeGroups([group])).groups)
    const state = { total: 0 }
    const me = await startConsumer(client, topic, group, 'd', state)
    await within(20000, `${count} records`, () => state.total >= count)
    out.reread = me.records.map(([partition, offset, key]) => [partition, offset, key])
    await me.consumer.disconnect()
    await admin.disconnect()
    return out
  }
}

main(async ([bootstrap, topic, group, phase, count, first]) => {
  const client = kafka(bootstrap, `kafkajs-${phase}-${group}`)
  return PHASES[phase](client, topic, group, Number(count || 0), Number(first || 0))
})
