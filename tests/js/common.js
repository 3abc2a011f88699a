'use strict'
// Shared by the kafkajs scripts: a client on argv's bootstrap address whose logs go to stderr
// (stdout carries only the JSON result), a bounded wait, and a main() that prints the result.
const { Kafka, logLevel } = require('kafkajs')

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

function stderrLogger () {
  return ({ namespace, label, log }) => {
    const { message, timestamp, logger, ...extra } = log
    process.stderr.write(`${timestamp} ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function kafka (bootstrap, clientId) {
  return new Kafka({
    clientId,
    brokers: [bootstrap],
    connectionTimeout: 3000,
    requestTimeout: 15000,
    logLevel: logLevel[process.env.KAFKAJS_LOG_LEVEL || 'WARN'],
    logCreator: stderrLogger
  })
}

async function within (ms, what, predicate) {
  const deadline = Date.now() + ms
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

function main (fn) {
  fn(process.argv.slice(2)).then(
    (result) => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) },
    (err) => { process.stderr.write(`FAILED: ${err && err.stack}\n${JSON.stringify(err)}\n`); process.exit(1) }
  )
}

module.exports = { kafka, main, within }
