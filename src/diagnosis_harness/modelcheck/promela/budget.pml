/*
 * The atomic budget reservation: check every limit and bump every counter in one locked step;
 * a refusal reserves nothing and ends the run.
 *
 * A template: diagnosis_harness.modelcheck._spin.render_budget() fills in the placeholders
 * (a dollar sign and a name) and the per-Tool conjunctions of the properties.
 *
 * The code it models (src/diagnosis_harness/_context.py, _budget.py):
 *   - RunContext.reserve_tool_call, under the run lock: if the run is live, call
 *     LocalRun.reserve_tool_call; a refusal ends the run (Lifecycle EXHAUST_BUDGET row)
 *     in the same locked section; a run already over rejects the call and reserves nothing.
 *   - LocalRun.reserve_tool_call: refuse if the total Tool calls reached their limit, or
 *     this Tool's calls reached the per-Tool limit (the budget takes its ACTIVE -> EXHAUSTED
 *     row); otherwise bump the total and this Tool's counter together.
 * The run lock is a d_step: one indivisible step that no other process, and no property,
 * can observe half done. Model calls and bytes are single counters reserved the same way;
 * reported token usage is recorded as reported, even past a limit, so it is not modelled here.
 *
 * Processes: RESERVERS threads each reserve one call of a Tool Spin picks (one of TOOLS).
 *
 * SEEDED_BUG 1 splits the reservation into two locked sections, check-then-act: the limits
 * are checked in one and the counters bumped in the next. Two threads can pass the check at
 * the last free call, and Spin shows usage going past a limit.
 */

#define RESERVERS $reservers
#define TOOLS $tools
#define TOOL_LIMIT $tool_limit
#define PER_TOOL_LIMIT $per_tool_limit
#define SEEDED_BUG $seeded_bug

bool live = true;           /* the lifecycle is RUNNING: no terminal outcome yet */
bool exhausted = false;     /* the budget is EXHAUSTED and the run BUDGET_EXHAUSTED */
byte tool_calls = 0;        /* total Tool calls reserved */
byte per_tool[TOOLS];       /* Tool calls reserved, per Tool */

#define WITHIN_LIMITS(t) (tool_calls < TOOL_LIMIT && per_tool[t] < PER_TOOL_LIMIT)

proctype Reserver() {
    byte t;
#if SEEDED_BUG
    bool ok = false;
    select (t : 0 .. TOOLS - 1);
    skip;   /* (Spin refuses a jump from select's loop straight into a d_step) */
    d_step { ok = live && WITHIN_LIMITS(t) };   /* BUG: the lock is released here */
    d_step {
        if
        :: ok -> tool_calls++; per_tool[t]++
        :: !ok && live -> exhausted = true; live = false
        :: else -> skip
        fi
    }
#else
    atomic {
        select (t : 0 .. TOOLS - 1);   /* which Tool: local, so picked in the same step */
        skip;   /* (Spin refuses a jump from select's loop straight into a d_step) */
        d_step {   /* reserve_tool_call, under the run lock */
            if
            :: live && WITHIN_LIMITS(t) -> tool_calls++; per_tool[t]++
            :: live && !WITHIN_LIMITS(t) -> exhausted = true; live = false  /* reserves nothing */
            :: else -> skip   /* the run is over: rejected, nothing reserved */
            fi
        };
        t = 0
    }
#endif
}

init {
    byte k;
    atomic {
        for (k : 1 .. RESERVERS) { run Reserver() }
    }
}

/* Usage never passes a limit. */
ltl within_limits { [] (tool_calls <= TOOL_LIMIT && $all_per_tool_within) }
/* The total always equals the sum per Tool: both move together or not at all. */
ltl consistent { [] (tool_calls == $sum_per_tool) }
/* Nothing is reserved once the run is over. */
ltl nothing_after_end { [] ($all_frozen_after_end) }
