/*
 * The atomic budget reservation: check every limit -- the call counters and the money -- and
 * bump every counter and the hold in one locked step; a refusal reserves nothing and ends the
 * run. Then the call's settle: its actual cost recorded (even past the limit, which exhausts the
 * budget and ends the run), its hold released, even after the run ended.
 *
 * A template: diagnosis_harness.modelcheck._spin.render_budget() fills in the placeholders
 * (a dollar sign and a name) and the per-Tool and per-Reserver conjunctions of the properties.
 *
 * The code it models (src/diagnosis_harness/_context.py, _budget.py, _local_run.py):
 *   - RunContext.reserve_tool_call(tool, max_cost=HOLD), under the run lock: if the run is
 *     live, call LocalRun.reserve_tool_call; a refusal ends the run (Lifecycle EXHAUST_BUDGET
 *     row) in the same locked section; a run already over rejects the call and reserves nothing.
 *   - LocalRun.reserve_tool_call: refuse if the total Tool calls reached their limit, or this
 *     Tool's calls reached the per-Tool limit, or settled + held + HOLD would pass the money
 *     limit (the budget takes its ACTIVE -> EXHAUSTED row); otherwise bump the total, this
 *     Tool's counter and the money held together.
 *   - CallHold.settle(cost=actual) -> LocalRun.settle, under the run lock: held -= HOLD,
 *     settled += actual, whatever the run says; if settled + held now passes the money limit
 *     the budget is EXHAUSTED and a live run ends BUDGET_EXHAUSTED (the settle ACTIVE ->
 *     EXHAUSTED row). The actual may be above the hold: a worst case the caller got wrong.
 * The run lock is a d_step: one indivisible step that no other process, and no property,
 * can observe half done. Model calls and bytes are single counters reserved the same way;
 * reported token usage is recorded as reported, even past a limit, so it is not modelled here.
 *
 * Processes: RESERVERS threads each reserve one call of Tool id % TOOLS (every order of the
 * reservers is explored, so which Tool reaches its limit first is too; a Tool picked by Spin
 * as well made the 7-reserver model three times bigger for no new order), holding HOLD, and, if granted, settle it at an actual cost Spin picks (0, HOLD or HOLD + 1); one
 * Ender ends the run on its own (a success, a cancel) at any point of the race.
 *
 * SEEDED_BUG 1 splits the reservation into two locked sections, check-then-act: the limits
 * are checked in one and the counters bumped in the next. Two threads can pass the check at
 * the last free call, and Spin shows usage going past a limit.
 * SEEDED_BUG 2 checks a hold against the money settled only, not settled + held (the check of
 * spend so far that a cost limit without holds makes): racing holds pass the limit with no
 * settle's actual to blame, and Spin shows it.
 */

#define RESERVERS $reservers
#define TOOLS $tools
#define TOOL_LIMIT $tool_limit
#define PER_TOOL_LIMIT $per_tool_limit
#define HOLD $hold
#define COST_LIMIT $cost_limit
#define SEEDED_BUG $seeded_bug

bool live = true;           /* the lifecycle is RUNNING: no terminal outcome yet */
bool exhausted = false;     /* the budget is EXHAUSTED */
bool overrun = false;       /* a settle's actual took settled + held past COST_LIMIT */
byte tool_calls = 0;        /* total Tool calls reserved */
byte per_tool[TOOLS];       /* Tool calls reserved, per Tool */
short held = 0;             /* money held by calls not settled yet (signed: never negative) */
short settled = 0;          /* the actual costs settled */
short spent = 0;            /* ghost: the sum of the actuals the settles were given */
byte holding[RESERVERS];    /* ghost: what each Reserver holds now */
byte finished = 0;          /* Reservers that are done (refused, rejected or settled) */
short held_at_end = 0;      /* ghost: the money held when the run ended */

/* The run ends (the first ending wins; a later one changes nothing). */
#define END() if :: live -> live = false; held_at_end = held :: else -> skip fi

#if SEEDED_BUG == 2
#define MONEY_FITS (settled + HOLD <= COST_LIMIT)   /* BUG: the holds are not counted */
#else
#define MONEY_FITS (settled + held + HOLD <= COST_LIMIT)
#endif
#define WITHIN_LIMITS(t) (tool_calls < TOOL_LIMIT && per_tool[t] < PER_TOOL_LIMIT && MONEY_FITS)

proctype Reserver(byte id) {
    byte t;
    byte actual;
    bool ok = false;
#if SEEDED_BUG == 1
    t = id % TOOLS;
    d_step { ok = live && WITHIN_LIMITS(t) };   /* BUG: the lock is released here */
    d_step {
        if
        :: ok -> tool_calls++; per_tool[t]++; held = held + HOLD; holding[id] = HOLD
        :: !ok && live -> exhausted = true; END()
        :: else -> skip
        fi
    };
#else
    atomic {
        t = id % TOOLS;   /* which Tool: local, so picked in the same step */
        d_step {   /* reserve_tool_call(t, max_cost=HOLD), under the run lock */
            if
            :: live && WITHIN_LIMITS(t) ->
                tool_calls++; per_tool[t]++; held = held + HOLD; holding[id] = HOLD; ok = true
            :: live && !WITHIN_LIMITS(t) -> exhausted = true; END()   /* reserves nothing */
            :: else -> skip   /* the run is over: rejected, nothing reserved */
            fi
        };
        t = 0
    };
#endif
    if
    :: ok ->   /* the call ran: settle it, whenever that is (the run may be over by now) */
        atomic {
            if   /* the actual cost: local, picked in this step; below, at or above the hold */
            :: actual = 0
            :: actual = HOLD
            :: actual = HOLD + 1
            fi;
            d_step {   /* hold.settle(cost=actual), under the run lock */
                held = held - HOLD;
                holding[id] = 0;
                settled = settled + actual;
                spent = spent + actual;
                if
                :: settled + held > COST_LIMIT ->
                    overrun = true; exhausted = true; END()   /* recorded; run over */
                :: else -> skip
                fi;
                finished++
            };
            actual = 0
        }
    :: else -> finished++
    fi;
    ok = false
}

proctype Ender() {
    d_step { END() }   /* the run ends some other way: succeed(), a cancel, a deadline */
}

init {
    byte k;
    atomic {
        for (k : 0 .. RESERVERS - 1) { run Reserver(k) };
        run Ender()
    }
}

/* Usage never passes a limit; settled + held passes the money limit only by a settle's actual,
 * which has exhausted the budget and ended the run by then. */
ltl within_limits {
    [] (tool_calls <= TOOL_LIMIT && $all_per_tool_within
        && (settled + held <= COST_LIMIT || (overrun && exhausted && !live)))
}
/* Holds alone never pass the money limit: a grant keeps settled + held within it. */
ltl money_within { [] (overrun || settled + held <= COST_LIMIT) }
/* The total always equals the sum per Tool, and the money held is exactly the holds of the
 * calls granted and not settled yet (a refused hold reserves nothing), never negative; every
 * actual is settled. */
ltl consistent {
    [] (tool_calls == $sum_per_tool && held == $sum_holding && held >= 0 && settled == spent)
}
/* Nothing is reserved once the run is over: the Tool calls stay put and the money held never
 * grows past what it held at the end (a settle may still release a hold). */
ltl nothing_after_end { [] ($all_frozen_after_end && (live || held <= held_at_end)) }
/* Every hold is settled in the end, even a hold settled after the run ended: nothing stays
 * held, and the money settled is the sum of the actuals. */
ltl all_settled { [] (finished == RESERVERS -> (held == 0 && settled == spent)) }
