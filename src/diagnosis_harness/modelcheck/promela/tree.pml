/*
 * A run tree: a root and three children racing. Every reservation of a child is decided for
 * the child and the root in one all-or-nothing locked step and counted in both; a settle is
 * recorded in both; any ending of the root cancels every live child in the same step; a
 * child's own ending never ends the root, but a child that exhausts the root's budget ends it.
 *
 * A template: diagnosis_harness.modelcheck._spin.render_tree() fills in the placeholders
 * (a dollar sign and a name) and the per-run conjunctions of the properties.
 *
 * The code it models (src/diagnosis_harness/_context.py, _local_run.py): every run of a tree
 * shares the root's lock, so a decision over the whole path is one locked step -- here a d_step.
 *   - child.reserve_tool_call(max_cost=HOLD, min_cost=LEAST): if the child is live, check the
 *     levels lowest first: the child's Tool calls and money room, then the root's. The hold is
 *     the least money left over the levels, capped at HOLD (a partial hold), refused only if
 *     not even LEAST fits. Granted: the call and the hold count in the child AND the root.
 *     Refused at the child: the child ends BUDGET_EXHAUSTED (it has no descendants). Refused at
 *     the root: the child ends (ANCESTOR_LIMIT), the root ends BUDGET_EXHAUSTED, and every other
 *     live child is cancelled (ANCESTOR_ENDED) -- all in the same step.
 *   - hold.settle(cost=actual): held -= hold, settled += actual at both levels, even after
 *     ends. The highest level now past its money limit ends with the caller, and its other live
 *     descendants cascade; a child past its own limit alone ends alone.
 *   - root.cancel() (any ending of the root: a cancel, a deadline, its owner's succeed()): the
 *     root ends and every live child ends CANCELLED in the same step (the cascade).
 *   - child.succeed(): the child's own ending; the root goes on.
 * A run ends through END(r) only: the terminal compare-and-set, so a run that has ended is
 * left as it is (a second ending changes nothing, as LocalRun._end_locked).
 *
 * Processes: CHILDREN children each make CALLS reservations one after the other (each settled,
 * if granted, at an actual Spin picks: 0, the hold or one more), then end on their own; one
 * Canceller cancels the root at any point; when every child is done, the root's owner ends the
 * root (a no-op if it has ended). Limits: the root's are below the children's sum, so a child
 * can exhaust the root; each child's money cap lets one full hold and one partial through.
 *
 * SEEDED_BUG 1 (child_only) checks a child's reservation against the child's limits only, yet
 * counts it in the root: racing children take the root past its limit.
 * SEEDED_BUG 2 (check_then_act) checks both levels in one locked step and bumps the counters
 * in the next: two children pass the check for the root's last call.
 * SEEDED_BUG 3 (cascade_skips) leaves the last child out of the cascade: it outlives its
 * ended root and can still be granted calls that count in it.
 * SEEDED_BUG 4 (cascade_reends) cascades into every child without the compare-and-set: a
 * child that had ended on its own ends a second time (its callbacks run twice).
 */

#define CHILDREN $children
#define RUNS $runs
#define CALLS $calls
#define ROOT_CALL_LIMIT $root_call_limit
#define CHILD_CALL_LIMIT $child_call_limit
#define ROOT_MONEY $root_money
#define CHILD_MONEY $child_money
#define HOLD $hold
#define LEAST $least
#define SEEDED_BUG $seeded_bug

bool live[RUNS];            /* run r has no terminal outcome yet; run 0 is the root */
byte ends[RUNS];            /* ghost: how many times run r ended */
bool exhausted[RUNS];       /* run r's budget is EXHAUSTED */
bool overrun[RUNS];         /* a settle's actual took run r's settled + held past its limit */
byte calls[RUNS];           /* Tool calls reserved at run r (the root's include its children's) */
short held[RUNS];           /* money held at run r by calls not settled yet */
short settled[RUNS];        /* money settled at run r */
short spent = 0;            /* ghost: the sum of the actuals the settles were given */
byte holding[RUNS];         /* ghost: what child r holds now */
bool late_grant = false;    /* ghost: a call was granted to a child of an ended root */
byte finished = 0;          /* children that are done */
bool done = false;          /* the root's owner has ended the root after every child */

/* The terminal compare-and-set: only a live run ends, and counts one ending. */
#define END(r) if :: live[r] -> live[r] = false; ends[r]++ :: else -> skip fi

#if SEEDED_BUG == 4
#define CASCADE_ONE(r) live[r] = false; ends[r]++   /* BUG: no compare-and-set */
#else
#define CASCADE_ONE(r) END(r)
#endif

/* The root ends, and every live child with it. */
#if SEEDED_BUG == 3
#define END_ROOT() END(0); $cascade_skipping   /* BUG: the last child is left out */
#else
#define END_ROOT() END(0); $cascade
#endif

#define ROOM(r, limit) (limit - settled[r] - held[r])
#define MIN(a, b) ((a) < (b) -> (a) : (b))

proctype Child(byte c) {
    byte k;
    short h;
    byte actual;
    bool ok;
    for (k : 1 .. CALLS) {
#if SEEDED_BUG == 2
        d_step {   /* BUG: the check, then the lock is released */
            h = MIN(MIN(HOLD, ROOM(c, CHILD_MONEY)), ROOM(0, ROOT_MONEY));
            ok = (live[c] && calls[c] < CHILD_CALL_LIMIT && calls[0] < ROOT_CALL_LIMIT
                && h >= LEAST)
        };
        d_step {
            if
            :: ok ->
                late_grant = late_grant || !live[0];
                calls[c]++; calls[0]++; held[c] = held[c] + h; held[0] = held[0] + h;
                holding[c] = h
            :: else -> skip   /* the refusals are not the point of this bug */
            fi
        };
#else
        d_step {   /* reserve_tool_call(max_cost=HOLD, min_cost=LEAST), under the tree's lock */
            ok = false;
            h = MIN(HOLD, ROOM(c, CHILD_MONEY));
            if
            :: !live[c] -> skip   /* the child has ended: rejected, nothing reserved */
            :: live[c] && (calls[c] >= CHILD_CALL_LIMIT || h < LEAST) ->
                exhausted[c] = true; END(c)   /* refused at the child: the child ends */
#if SEEDED_BUG == 1
            :: live[c] && calls[c] < CHILD_CALL_LIMIT && h >= LEAST ->   /* BUG: no root check */
#else
            :: (live[c] && calls[c] < CHILD_CALL_LIMIT && h >= LEAST
                && (calls[0] >= ROOT_CALL_LIMIT || ROOM(0, ROOT_MONEY) < LEAST)) ->
                /* refused at the root: the child, then the root, then the other children */
                exhausted[0] = true; END(c); END_ROOT()
            :: (live[c] && calls[c] < CHILD_CALL_LIMIT && h >= LEAST
                && calls[0] < ROOT_CALL_LIMIT && ROOM(0, ROOT_MONEY) >= LEAST) ->
                h = MIN(h, ROOM(0, ROOT_MONEY));
#endif
                late_grant = late_grant || !live[0];
                calls[c]++; calls[0]++; held[c] = held[c] + h; held[0] = held[0] + h;
                holding[c] = h; ok = true
            fi
        };
#endif
        if
        :: ok ->   /* the call ran: settle it, whenever that is (the run may be over by now) */
            atomic {
                if   /* the actual: local, picked in this step; below, at or above the hold */
                :: actual = 0
                :: actual = h
                :: actual = h + 1
                fi;
                d_step {   /* hold.settle(cost=actual), under the tree's lock */
                    held[c] = held[c] - h; held[0] = held[0] - h; holding[c] = 0;
                    settled[c] = settled[c] + actual; settled[0] = settled[0] + actual;
                    spent = spent + actual;
                    if   /* the highest level past its limit ends, with the path below it */
                    :: settled[0] + held[0] > ROOT_MONEY ->
                        overrun[0] = true; exhausted[0] = true; END(c); END_ROOT()
                    :: else -> skip
                    fi;
                    if
                    :: settled[c] + held[c] > CHILD_MONEY ->
                        overrun[c] = true; exhausted[c] = true; END(c)
                    :: else -> skip
                    fi
                };
                actual = 0
            }
        :: else -> skip
        fi;
        ok = false;
        h = 0
    };
    k = 0;   /* (a step of its own: the loop's exit may not jump into a d_step) */
    d_step { END(c); finished++ }   /* the child's own ending: succeed(); the root goes on */
}

proctype Canceller() {
    d_step { END_ROOT() }   /* root.cancel(): the root and every live child */
}

init {
    byte r;
    atomic {
        for (r : 0 .. RUNS - 1) { live[r] = true };
        for (r : 1 .. CHILDREN) { run Child(r) };
        run Canceller();
        r = 0
    };
    finished == CHILDREN;
    d_step { END_ROOT(); done = true }   /* the root's owner ends it: succeed() */
}

/* No level ever passes its Tool-call limit, and settled + held passes a level's money limit
 * only by a settle's actual, which has exhausted that level and ended it by then. */
ltl within_limits { [] ($all_within) }
/* The root's counters are its children's, as they happen (the rollup); the money held at each
 * child is exactly its unsettled hold, never negative; every actual is settled in both. */
ltl rollup {
    [] (calls[0] == $sum_calls && held[0] == $sum_held && settled[0] == $sum_settled
        && settled[0] == spent && $all_holding)
}
/* Every child of an ended root has ended: the cascade is in the same step as the ending. */
ltl descendants_end { [] (live[0] || ($all_children_ended)) }
/* No run ends twice, and once the root's owner is done every run has ended exactly once. */
ltl one_ending { [] ($all_at_most_once && (!done || $all_ended_once)) }
/* Nothing is granted to a child once the root has ended. */
ltl nothing_after_end { [] (!late_grant) }
