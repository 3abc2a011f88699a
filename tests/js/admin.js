'use strict'
// Admin: createTopics (3 partitions), fetchTopicMetadata, listTopics, deleteTopics.
// Usage: node admin.js <bootstrap> <topic>
const { kafka, main } = require('./common')

main(async ([bootstrap, topic]) => {
  const admin = kafka(bootstrap, `kafkajs-admin-${topic}`).admin()
  await admin.connect()
  try {
    const out = {}
    out.created = await admin.createTopics({
      topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true
    })
    // a second create of the same topic reports false (TOPIC_ALREADY_EXISTS swallowed by kafkajs)
    out.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }] })
    const meta = await admin.fetchTopicMetadata({ topics: [topic] })
    out.metadata = meta.topics.map((t) => ({
      name: t.name,
      partitions: t.partitions
        .map((p) => ({ partitionId: p.partitionId, leader: p.leader, replicas: p.replicas,
          isr: p.isr, partitionErrorCode: p.partitionErrorCode }))
        .sort((a, b) => a.partitionId - b.partitionId)
    }))
    out.listedBefore = (await admin.listTopics()).includes(topic)
    await admin.deleteTopics({ topics: [topic], timeout: 5000 })
    out.listedAfter = (await admin.listTopics()).includes(topic)
    try {
      await admin.fetchTopicMetadata({ topics: [topic] })
      out.metadataAfterDelete = 'no error'
    } catch (e) {
      out.metadataAfterDelete = e.type || e.name
    }
    return out
  } finally {
    await admin.disconnect()
  }
})
