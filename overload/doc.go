// Package overload holds kretry's overload policies for one source topic
// (issue 11; docs/OVERLOAD.md): a Gate that the engine asks before each
// delivery (Admit) and tells after it (Done). It knows nothing of Kafka;
// the engine does what it says: it pauses the source and tier partitions
// while Paused, starts a delivery only with a Ticket, and routes a failed
// delivery only when Done answers Count — Hold means the record consumed
// no attempt and waits at the head of its key (DESIGN.md invariant 9).
//
// The Gate composes, in this order:
//
//   - the dependency breaker (breaker.go): most recent deliveries failing
//     transiently across many keys open it (a slow failure is also judged
//     over its own flight, so a clump of timeouts that started together
//     among healthy traffic does not); open, nothing is delivered and
//     failures are held; after a jittered wait that doubles per failed
//     round it lets Probes deliveries through; when a majority succeed it
//     closes and the in-flight limit grows back by one per success (slow
//     start); each reopening soon after a close doubles the window of
//     deliveries the next opening needs (hysteresis, window.go);
//   - the systemic permanent failure guard (guard.go): the same permanent
//     answer for many records of at least two keys, and for most
//     deliveries within a window, opens the same breaker after at most
//     MaxDeadLetters such records were dead-lettered;
//   - the adaptive in-flight limit of app.max_in_flight: auto (failsafe-go's
//     adaptivelimiter);
//   - the retry budget (budget.go): tier records at most a share of the
//     deliveries over a window, plus a floor per second;
//   - the rate limit of app.max_rate (golang.org/x/time/rate).
//
// A Gate is safe for concurrent use; its clock is the time passed in, so
// tests drive it with testing/synctest or plain time values.
package overload
