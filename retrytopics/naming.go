package retrytopics

import (
	"strconv"
	"strings"
	"time"
)

// FormatTier renders a tier delay compactly for topic names: 100ms, 1s,
// 90s → "1m30s", 10m, 1h, 36h → "36h". Units are h, m, s and ms; zero
// components are left out.
func FormatTier(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			d -= n * u.unit
		}
	}
	if b.Len() == 0 { // sub-millisecond
		return d.String()
	}
	return b.String()
}

// TierTopic is the default name of a retry tier topic: <topic>.retry.<tier>,
// for example orders.retry.10m.
func TierTopic(topic string, tier time.Duration) string {
	return topic + ".retry." + FormatTier(tier)
}

// DLQTopic is the default dead-letter topic name: <topic>.dlq.
func DLQTopic(topic string) string { return topic + ".dlq" }

// ParkingTopic is the default parking topic name: <topic>.parking.
func ParkingTopic(topic string) string { return topic + ".parking" }
