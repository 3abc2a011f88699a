'use strict'
// Shared by the kafkajs scripts: a client on argv's bootstrap address (TLS trusting the CA in
// KAFKAJS_SSL_CA when set; SASL with KAFKAJS_SASL_MECHANISM, _USERNAME and _PASSWORD when set)
// whose logs go to stderr (stdout carries only the JSON result), a bounded wait, and a main()
// that prints the result.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

function stderrLogger () {
  return ({ namespace, label, log }) => {
    const { message, timestamp, logger, ...extra } = log
    const json = JSON.stringify(extra, (k, v) => typeof v === 'bigint' ? v.toString() : v)
    process.stderr.write(`${timestamp} ${label} [${namespace}] ${message} ${json}\n`)
  }
}

function kafka (bootstrap, clientId) {
  return new Kafka({
    clientId,
    brokers: [bootstrap],
    ssl: process.env.KAFKAJS_SSL_CA ? { ca: [fs.readFileSync(process.env.KAFKAJS_SSL_CA)] } : undefined,
    sasl: process.env.KAFKAJS_SASL_MECHANISM
      ? { mechanism: process.env.KAFKAJS_SASL_MECHANISM, username: process.env.KAFKAJS_SASL_USERNAME,
          password: process.env.KAFKAJS_SASL_PASSWORD }
      : undefined,
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
