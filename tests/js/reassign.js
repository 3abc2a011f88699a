'use strict'
// Admin: alterPartitionReassignments of partition 0 to the given replicas, then
// listPartitionReassignments of the topic (KIP-455 through kafkajs, which sends both to the
// controller). Usage: node reassign.js <bootstrap> <topic> <replica,replica,...>
const { kafka, main } = require('./common')

main(async ([bootstrap, topic, replicas]) => {
  const admin = kafka(bootstrap, `kafkajs-reassign-${topic}`).admin()
  await admin.connect()
  try {
    await admin.alterPartitionReassignments({
      topics: [{ topic, partitionAssignment: [{ partition: 0, replicas: replicas.split(',').map(Number) }] }]
    })
    const listed = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [0] }] })
    return listed
  } finally {
    await admin.disconnect()
  }
})
