'use strict'
// One group member that runs until killed, printing {pid, assignment} as a JSON line at every
// join (sessionTimeout 2000 ms, heartbeats every 200 ms).
// Usage: node member.js <bootstrap> <topic> <group>
const { kafka } = require('./common')

const [bootstrap, topic, group] = process.argv.slice(2)
const consumer = kafka(bootstrap, `kafkajs-member-${group}`).consumer({
  groupId: group, sessionTimeout: 2000, heartbeatInterval: 200, maxWaitTimeInMs: 200,
  allowAutoTopicCreation: false
})
consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  const assignment = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  process.stdout.write(JSON.stringify({ pid: process.pid, assignment }) + '\n')
})
;(async () => {
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({ eachMessage: async () => {} })
})().catch((err) => { process.stderr.write(`FAILED: ${err && err.stack}\n`); process.exit(1) })
