// Package e2e follows notifications through the whole pipeline in one
// process: POST /orders on the example shop, the SQLite outbox, the
// publisher, JetStream, the telegram worker, and the Bot API emulator over
// real HTTP. Its tests port the seed article's shared scenario ("what the
// tests check").
package e2e
