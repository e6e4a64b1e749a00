package gameday

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestPlanJSONHoldsEveryFigure: --json's plan carries every field of the
// Plan, a duration in milliseconds under the field's name with "For"
// dropped and "MS" added (SteadyFor → SteadyMS, Settle → SettleMS), with
// the value the plan has (docs/GAMEDAY.md, "Report").
func TestPlanJSONHoldsEveryFigure(t *testing.T) {
	p := Full()
	info := reflect.ValueOf(planJSON(&p))
	plan := reflect.ValueOf(p)
	durations := reflect.TypeFor[[]time.Duration]()
	for i := range plan.NumField() {
		f := plan.Type().Field(i)
		name, want := f.Name, plan.Field(i).Interface()
		switch v := want.(type) {
		case time.Duration:
			name, want = strings.TrimSuffix(name, "For")+"MS", ms(v)
		default:
			if f.Type == durations {
				name = name + "MS"
				var got []float64
				for _, d := range v.([]time.Duration) {
					got = append(got, ms(d))
				}
				want = got
			}
		}
		got := info.FieldByName(name)
		if !got.IsValid() {
			t.Errorf("Plan.%s has no field %s in planInfo: --json leaves it out", f.Name, name)
			continue
		}
		if !reflect.DeepEqual(got.Interface(), want) {
			t.Errorf("planInfo.%s = %v, want %v (Plan.%s)", name, got.Interface(), want, f.Name)
		}
	}
}
