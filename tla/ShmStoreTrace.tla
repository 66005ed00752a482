--------------------------- MODULE ShmStoreTrace ---------------------------
(***************************************************************************)
(* Trace validation of ShmStore (shmspec validate, docs/trace-validation.md). *)
(* Traces are runs a real store made (recorded controlled schedules and   *)
(* free runs), one after another: each a sequence of records, one per     *)
(* step a process took: the spec action that step takes and what the      *)
(* harness observed after it.                                             *)
(* TraceSpec's behaviours are the spec's behaviours constrained to the    *)
(* recorded ones: each step must take its action and leave the observed   *)
(* variables as recorded; what no process observes (pins, acks, the drain *)
(* window, memory) TLC finds.  When run t is taken whole the store starts *)
(* afresh (Init) for run t + 1.  Every run is accepted when a state past  *)
(* the last step of the last run is reachable (Where prints it).          *)
(*                                                                         *)
(* A step's fields: act (the spec action, "none" for a step that takes no *)
(* spec action: an operation's start, "wait_more" for a round of the      *)
(* writer's pin wait that still waits, "refused" for a put that raised    *)
(* OutOfSpace or DuplicateKey: the spec's writer could not have put it);  *)
(* r the reader; key, size the put (size in units, here bytes); abs the   *)
(* allocation a get's handle names, or a publish's; hid, haddr the handle *)
(* a publish returned (id, physical address); wpc, pc what the writer's   *)
(* and the reader's pc must be after the step ("" unobserved); got "own"  *)
(* or "other" for what a deserialize made of the bytes; ring the writer's *)
(* live chunks after the step as <<physical address, size, id>> (hasRing). *)
(*                                                                         *)
(* The order of the steps: p is the process that took a step, nxt the    *)
(* index of p's next step (Len + 1: none), lo and hi the times the step   *)
(* began and ended (a free run's clock; a controlled schedule's steps     *)
(* have lo = hi = their index: one order).  A step may be taken when no   *)
(* step still to take ended before it began (an interval order): where   *)
(* the steps of processes running at once overlap, TLC tries each order.  *)
(*                                                                         *)
(* The one spec action a recorded step cannot pin down: impl's writer     *)
(* publishes what a put kills before its pin_scan yield point and reads   *)
(* the pins after it, where the spec's pin_scan does both at once; the    *)
(* spec's pin_scan is taken anywhere from the step that reached the yield *)
(* point to the one that leaves it (scanOpen marks those steps); a pin   *)
(* that silent pin_scan found and that went before the step leaving the   *)
(* yield point is one the real scan never saw: that step may take         *)
(* pin_wait too.                                                          *)
(***************************************************************************)
EXTENDS ShmStore, TraceData  \* TraceData: Traces, a sequence of recorded runs,
                              \* each a sequence of steps (shmspec validate writes
                              \* the module; tla/TraceData.tla is an empty run)
VARIABLES t,        \* the run being taken
          l,        \* how many of its steps were taken, plus one
          nx        \* nx[p]: the index of process p's next step in the run

traceVars == <<vars, t, l, nx>>
TraceLog == Traces[t]
Procs == {"writer"} \cup Readers

\* the index of process p's first step in run T (TraceData's Firsts)
FirstOf(T, p) == IF p \in DOMAIN Firsts[T] THEN Firsts[T][p] ELSE Len(Traces[T]) + 1
Starts(T) == [p \in Procs |-> FirstOf(T, p)]

TraceInit == Init /\ t = 1 /\ l = 1 /\ nx = Starts(1)

\* step i may go next: no step still to take ended before it began
Ready(i) == \A q \in Procs : nx[q] <= Len(TraceLog) => TraceLog[nx[q]].hi >= TraceLog[i].lo

Take(e) ==
    CASE e.act = "none"              -> UNCHANGED vars
      [] e.act = "refused"           -> wpc = "idle" /\ ~CanPut(e.key, e.size) /\ UNCHANGED vars
      [] e.act = "scan"              -> \/ wpc = "idle" /\ pin_scan(e.key, e.size)
                                        \/ /\ wpc \in {"wait", "ready"} /\ pend # <<>> /\ pend[1].key = e.key
                                           /\ \/ UNCHANGED vars
                                              \/ pin_wait  \* the pins it waited for went before the real scan read them
      [] e.act = "wait_more"         -> wpc = "wait" /\ UNCHANGED vars
      [] e.act = "pin_wait"          -> pin_wait
      [] e.act = "header_write"      -> header_write(e.key, e.size)
      [] e.act = "payload_write"     -> payload_write
      [] e.act = "publish"           -> publish
      [] e.act = "free_step"         -> free_step
      [] e.act = "retire"            -> retire
      [] e.act = "clear"             -> clear
      [] e.act = "pin"               -> \E h \in issued : h.abs = e.abs /\ PinOf(e.r, h)
      [] e.act = "reader_check"      -> reader_check(e.r)
      [] e.act = "deserialize"       -> deserialize(e.r)
      [] e.act = "counter_increment" -> counter_increment(e.r)
      [] e.act = "unpin"             -> unpin(e.r)

\* (IF, not \/: TLC takes each disjunct of an action as a step of its own)
Observed(e) ==
    /\ IF e.wpc = "" THEN TRUE ELSE wpc' = e.wpc
    /\ IF e.pc = "" THEN TRUE ELSE pc'[e.r] = e.pc
    /\ CASE e.got = "own"   -> got'[e.r] = hd'[e.r].obj
         [] e.got = "other" -> got'[e.r] \notin {NoObj, hd'[e.r].obj}
         [] OTHER           -> TRUE
    /\ IF ~e.hasRing THEN TRUE
       ELSE /\ Len(chunks') = Len(e.ring)
            /\ \A i \in 1..Len(e.ring) :
                 /\ Phys(chunks'[i].addr) = e.ring[i][1]
                 /\ chunks'[i].size = e.ring[i][2]
                 /\ chunks'[i].id = e.ring[i][3] % IdMod
    /\ IF e.act # "publish" THEN TRUE
       ELSE \E h \in issued' : h.abs = e.abs /\ h.id = e.hid % IdMod /\ Phys(h.addr) = e.haddr

\* the spec's pin_scan of the put whose yield point the writer sits at (its
\* next step leaves pin_scan)
SilentScan ==
    LET i == nx["writer"] IN
    /\ i <= Len(TraceLog) /\ TraceLog[i].scanOpen /\ wpc = "idle"
    /\ pin_scan(TraceLog[i].scanKey, TraceLog[i].scanSize)
    /\ UNCHANGED <<t, l, nx>>

\* Init, primed (TLC cannot evaluate Init' itself); a test checks that a
\* run validates alone exactly when it validates after another one
Fresh ==
    /\ start' = 0 /\ end' = 0 /\ idStart' = 0 /\ idEnd' = 0 /\ chunks' = <<>>
    /\ mem' = [u \in Units |-> [id |-> 0, size |-> 0, cnt |-> 0, obj |-> NoObj]]
    /\ wpc' = "idle" /\ pubStart' = 0 /\ pubEnd' = 0 /\ puts' = 0 /\ issued' = {} /\ clearAt' = 0
    /\ pend' = <<>> /\ wwait' = {} /\ drainLo' = 0 /\ drainHi' = 0 /\ drainHw' = 0 /\ planned' = 0
    /\ pc' = [r \in Readers |-> "idle"] /\ hd' = [r \in Readers |-> NoHandle]
    /\ hsz' = [r \in Readers |-> 0] /\ got' = [r \in Readers |-> NoObj] /\ floor' = [r \in Readers |-> 0]
    /\ starts' = [r \in Readers |-> [a \in Abs |-> 0]]
    /\ pins' = [r \in Readers |-> 0] /\ verdict' = [r \in Readers |-> "none"]
    /\ acks' = [r \in Readers |-> [a \in Abs |-> 0]]

\* run t taken whole: the next one starts on a fresh store
NextRun == l > Len(TraceLog) /\ t < Len(Traces) /\ Fresh /\ t' = t + 1 /\ l' = 1 /\ nx' = Starts(t + 1)

\* process p takes its next step
Step(p) ==
    LET i == nx[p] IN
    /\ i <= Len(TraceLog) /\ Ready(i)
    /\ Take(TraceLog[i]) /\ Observed(TraceLog[i])
    /\ nx' = [nx EXCEPT ![p] = TraceLog[i].nxt] /\ l' = l + 1 /\ UNCHANGED t

TraceNext ==
    \/ \E p \in Procs : Step(p)
    \/ SilentScan
    \/ NextRun

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

\* the first step in the run's order still to take (Len + 1: none)
Pending == LET m == {nx[p] : p \in Procs} IN CHOOSE i \in m : \A j \in m : i <= j

\* What a check prints (TLC's PrintT in an invariant that always holds, so
\* that TLC never prints a counterexample as long as the run): where each
\* state is in the runs; every run was taken whole when a state past the
\* last step of the last run is printed.
Where == PrintT(<<"shmspec-at", t, l, Pending>>)

\* the whole state (tla/ShmStore.tla's VARIABLES, in order)
StateRec == [start |-> start, end |-> end, idStart |-> idStart, idEnd |-> idEnd, chunks |-> chunks, mem |-> mem,
             wpc |-> wpc, pubStart |-> pubStart, pubEnd |-> pubEnd, puts |-> puts, issued |-> issued,
             clearAt |-> clearAt, pend |-> pend, wwait |-> wwait, planned |-> planned, drainLo |-> drainLo,
             drainHi |-> drainHi, drainHw |-> drainHw, pc |-> pc, hd |-> hd, hsz |-> hsz, got |-> got,
             floor |-> floor, starts |-> starts, pins |-> pins, verdict |-> verdict, acks |-> acks]

\* the states of run T that took L - 1 steps (shmspec validate's second
\* check: the states a departure is reached from)
ShowAt(T, L) == IF t = T /\ l = L THEN PrintT(<<"shmspec-state", StateRec>>) ELSE TRUE
=============================================================================
