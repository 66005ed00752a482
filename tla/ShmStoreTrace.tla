--------------------------- MODULE ShmStoreTrace ---------------------------
(***************************************************************************)
(* Trace validation of ShmStore (shmspec validate, docs/trace-validation.md). *)
(* TraceLog is a run a real store made (a recorded controlled schedule):   *)
(* one record per scheduled step, the spec action that step takes and     *)
(* what the harness observed after it.  TraceSpec's behaviours are the    *)
(* spec's behaviours constrained to the recorded one: each step must take *)
(* its action and leave the observed variables as recorded; what no      *)
(* process observes (pins, acks, the drain window, memory) TLC finds.     *)
(* The trace is accepted when a state with l = Len(TraceLog) + 1 is       *)
(* reachable: TraceAccepted's "violation" is the verdict pass.            *)
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
(* The one spec action a recorded step cannot pin down: impl's writer     *)
(* publishes what a put kills before its pin_scan yield point and reads   *)
(* the pins after it, where the spec's pin_scan does both at once; the    *)
(* spec's pin_scan is taken anywhere from the step that reached the yield *)
(* point to the one that leaves it (scanOpen marks those steps).          *)
(***************************************************************************)
EXTENDS ShmStore

CONSTANT TraceLog
VARIABLE l          \* the recorded step to take next

traceVars == <<vars, l>>

TraceInit == Init /\ l = 1

Take(e) ==
    CASE e.act = "none"              -> UNCHANGED vars
      [] e.act = "refused"           -> wpc = "idle" /\ ~CanPut(e.key, e.size) /\ UNCHANGED vars
      [] e.act = "scan"              -> \/ wpc = "idle" /\ pin_scan(e.key, e.size)
                                        \/ /\ wpc \in {"wait", "ready"} /\ pend # <<>> /\ pend[1].key = e.key
                                           /\ UNCHANGED vars
      [] e.act = "wait_more"         -> wpc = "wait" /\ UNCHANGED vars
      [] e.act = "pin_wait"          -> pin_wait
      [] e.act = "header_write"      -> header_write(e.key, e.size)
      [] e.act = "payload_write"     -> payload_write
      [] e.act = "publish"           -> publish
      [] e.act = "free_step"         -> free_step
      [] e.act = "clear"             -> clear
      [] e.act = "pin"               -> \E h \in issued : h.abs = e.abs /\ PinOf(e.r, h)
      [] e.act = "reader_check"      -> reader_check(e.r)
      [] e.act = "deserialize"       -> deserialize(e.r)
      [] e.act = "counter_increment" -> counter_increment(e.r)

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

\* the spec's pin_scan of the put whose yield point the writer sits at
SilentScan ==
    /\ l <= Len(TraceLog) /\ TraceLog[l].scanOpen /\ wpc = "idle"
    /\ pin_scan(TraceLog[l].scanKey, TraceLog[l].scanSize)
    /\ UNCHANGED l

TraceNext ==
    \/ /\ l <= Len(TraceLog)
       /\ Take(TraceLog[l]) /\ Observed(TraceLog[l])
       /\ l' = l + 1
    \/ SilentScan

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

\* "violated" once the whole trace is taken: the verdict pass
TraceAccepted == l <= Len(TraceLog)
=============================================================================
