/*
 * Cancellation callbacks: the first signal wins and every callback runs exactly once.
 *
 * A template: diagnosis_harness.modelcheck._spin.render_callbacks() fills in the placeholders
 * (a dollar sign and a name) and the per-callback conjunctions of the properties.
 *
 * The code it models (src/diagnosis_harness/_cancellation.py, _lifecycle.py):
 *   - CancelSignal.signal, under the run lock: if no reason is set, set it and TAKE
 *     every registered callback out of the registry. Only the winner of the terminal race
 *     signals (LocalRun._end_locked), and cancel() goes through the same check.
 *   - CancelSignal.deliver, outside the lock: run the taken callbacks in registration order.
 *   - Cancellation.register, under the lock: add the callback while no reason is set; otherwise
 *     (a late registration) run it at once, inline, after releasing the lock.
 *   - Registration.unregister -> CancelSignal.unregister, under the lock: remove the callback only
 *     if it is still in the registry (not taken yet); True only then.
 * The run lock is a d_step: one indivisible step that no other process, and no property,
 * can observe half done.
 *
 * Processes: SIGNALLERS racers end the run (say lifecycle.succeed() -> RUN_FINISHED and
 * cancel(CLIENT_DISCONNECTED)); CALLBACKS owners each register one callback and then either
 * keep it or unregister it, whichever Spin picks.
 *
 * SEEDED_BUG 1 removes the lock from the signalling path: the reason is read, set, and the
 * registry read and cleared as separate steps. Two signallers can then both win and both take
 * the same callbacks, and Spin shows a callback that runs twice.
 */

#define SIGNALLERS $signallers
#define CALLBACKS $callbacks
#define SEEDED_BUG $seeded_bug

byte reason = 0;            /* 0: not cancelled; else the winning signaller's reason, 1.. */
byte registry = 0;          /* bit c: callback c is registered and not taken */
byte runs[CALLBACKS];       /* how many times callback c ran */
byte got[CALLBACKS];        /* the reason callback c received when it ran */
bool removed[CALLBACKS];    /* unregister() returned True for callback c */

/* Run callback c with reason r (the callback's body: count it, note what it got). */
inline run_callback(c, r) {
    d_step { runs[c]++; got[c] = r }
}

proctype Signaller(byte r) {
    byte pending = 0;
    byte i = 0;
#if SEEDED_BUG
    /* BUG: no lock around "first reason wins, take the callbacks". */
    if
    :: reason == 0 ->
        reason = r;
        pending = registry;
        registry = 0
    :: else -> skip
    fi;
#else
    d_step {   /* CancelSignal.signal, under the run lock */
        if
        :: reason == 0 -> reason = r; pending = registry; registry = 0
        :: else -> skip
        fi
    };
#endif
    /* _deliver, outside the lock, in registration order */
    do
    :: i < CALLBACKS ->
        if
        :: pending & (1 << i) -> run_callback(i, r)
        :: else -> skip
        fi;
        i++
    :: else -> break
    od
}

proctype Owner(byte c) {
    byte late = 0;
    d_step {   /* register(), under the run lock */
        if
        :: reason == 0 -> registry = registry | (1 << c)
        :: else -> late = reason
        fi
    };
    if
    :: late != 0 -> run_callback(c, late)   /* a late registration runs at once, inline */
    :: else ->
        if
        :: true -> skip                     /* keeps its registration */
        :: true ->
            d_step {   /* unregister(): removes only a callback not taken yet */
                if
                :: registry & (1 << c) -> registry = registry & ~(1 << c); removed[c] = true
                :: else -> skip
                fi
            }
        fi
    fi
}

init {
    byte k;
    atomic {
        for (k : 1 .. SIGNALLERS) { run Signaller(k) }
        for (k : 0 .. CALLBACKS - 1) { run Owner(k) }
    }
}

/* A callback never runs twice. */
ltl once { [] ($all_once) }
/* Every callback not unregistered runs: the one signal or, if late, inline. */
ltl delivered { <> ($all_delivered) }
/* A callback that unregister() removed never runs. */
ltl unregistered_never_runs { [] ($all_removed_never_run) }
/* Every callback receives the first reason, the one kept. */
ltl first_reason { [] ($all_first_reason) }
