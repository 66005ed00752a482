---------------------------- MODULE Slots ----------------------------
(* The slot-flag protocol of vLLM's MessageQueue ring and ShmTensorArena
   (docs/slots.md), at the atomicity of model/slots.py: the claim, the copy's
   start and end, the flag reset, the publish, a reader's acquire, read and
   release are one action each, sequentially consistent.  Its variables are
   the model's, one for one, so TLC's distinct states equal the model's BFS
   count (tests/conformance/spec/test_slots_tla.py).  Faults: the model's
   wrong orders (Config.faults).

   Memory: the writer's store order (Config.memory).  "sc": every store is
   visible at once.  "tso" (x86) and "pso" (ARM, POWER): each writer store
   waits in wbuf, drained oldest first (tso) or in any order except to one
   location (pso); the writer reads its own newest buffered store (WRead);
   a fence (Fences: "claim" after the claim, "publish" between the flag
   reset and written; vLLM 0.33.0 has "publish" only) is a step that waits
   for an empty buffer.  Readers' stores are visible at once. *)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS R, S, M, Faults, Memory, Fences

TORN == -2
EMPTY == -1
Slots == 0..(S - 1)
Rdrs == 1..R

VARIABLES written, done, data, wpc, widx, wmsg, rpc, ridx, rhold, rgot, wbuf
vars == <<written, done, data, wpc, widx, wmsg, rpc, ridx, rhold, rgot, wbuf>>
readers == <<rpc, ridx, rhold, rgot>>
mem == <<written, done, data>>
Weak == Memory # "sc"

Init ==
    /\ written = [s \in Slots |-> 0]
    /\ done = [s \in Slots |-> [r \in Rdrs |-> 0]]
    /\ data = [s \in Slots |-> EMPTY]
    /\ wpc = "idle" /\ widx = 0 /\ wmsg = 0
    /\ rpc = [r \in Rdrs |-> "check"]
    /\ ridx = [r \in Rdrs |-> 0]
    /\ rhold = [r \in Rdrs |-> EMPTY]
    /\ rgot = [r \in Rdrs |-> <<>>]
    /\ wbuf = <<>>

F(x) == x \in Faults

(* a writer store: kind "w" (written), "d" (done of reader r), "x" (data) *)
St(k, sl, r, v) == [k |-> k, s |-> sl, r |-> r, v |-> v]
Loc(e) == <<e.k, e.s, e.r>>
Mem(k, sl, r) == IF k = "w" THEN written[sl] ELSE IF k = "x" THEN data[sl] ELSE done[sl][r]
WRead(k, sl, r) ==
    LET at == {i \in 1..Len(wbuf) : Loc(wbuf[i]) = <<k, sl, r>>}
    IN IF at = {} THEN Mem(k, sl, r) ELSE wbuf[CHOOSE i \in at : \A j \in at : j <= i].v
Apply(e) ==
    /\ written' = IF e.k = "w" THEN [written EXCEPT ![e.s] = e.v] ELSE written
    /\ data' = IF e.k = "x" THEN [data EXCEPT ![e.s] = e.v] ELSE data
    /\ done' = IF e.k = "d" THEN [done EXCEPT ![e.s][e.r] = e.v] ELSE done
(* the stores es (a sequence): visible at once under "sc", else buffered *)
Store(es) ==
    IF Weak THEN wbuf' = wbuf \o es /\ UNCHANGED mem
    ELSE /\ UNCHANGED wbuf
         /\ written' = [sl \in Slots |-> IF \E i \in 1..Len(es) : es[i].k = "w" /\ es[i].s = sl
                                            THEN es[Len(es)].v ELSE written[sl]]
         /\ data' = [sl \in Slots |-> IF \E i \in 1..Len(es) : es[i].k = "x" /\ es[i].s = sl
                                         THEN es[Len(es)].v ELSE data[sl]]
         /\ done' = [sl \in Slots |-> [r \in Rdrs |->
                        IF \E i \in 1..Len(es) : es[i].k = "d" /\ es[i].s = sl /\ es[i].r = r
                        THEN 0 ELSE done[sl][r]]]

Drain ==
    \E i \in 1..Len(wbuf) :
        /\ Memory = "tso" => i = 1
        /\ \A j \in 1..(i - 1) : Loc(wbuf[j]) # Loc(wbuf[i])
        /\ Apply(wbuf[i])
        /\ wbuf' = SubSeq(wbuf, 1, i - 1) \o SubSeq(wbuf, i + 1, Len(wbuf))
        /\ UNCHANGED <<wpc, widx, wmsg>> /\ UNCHANGED readers

Claim ==
    /\ wpc = "idle" /\ wmsg < M
    /\ \/ WRead("w", widx, 0) = 0
       \/ \A r \in Rdrs : WRead("d", widx, r) = 1
       \/ F("free_ignores_readers")
    /\ LET after == IF F("reset_first") THEN "reset" ELSE "copy_begin"
       IN wpc' = IF Weak /\ "claim" \in Fences /\ ~F("no_claim") THEN "fence_claim_" \o after ELSE after
    /\ IF F("no_claim") THEN UNCHANGED <<written, done, data, wbuf>> ELSE Store(<<St("w", widx, 0, 0)>>)
    /\ UNCHANGED <<widx, wmsg>> /\ UNCHANGED readers

FenceClaim ==
    /\ wpc \in {"fence_claim_copy_begin", "fence_claim_reset"} /\ wbuf = <<>>
    /\ wpc' = IF wpc = "fence_claim_reset" THEN "reset" ELSE "copy_begin"
    /\ UNCHANGED <<written, done, data, widx, wmsg, wbuf>> /\ UNCHANGED readers

FencePublish ==
    /\ wpc = "fence" /\ wbuf = <<>>
    /\ wpc' = "publish"
    /\ UNCHANGED <<written, done, data, widx, wmsg, wbuf>> /\ UNCHANGED readers

CopyBegin ==
    /\ wpc = "copy_begin"
    /\ Store(<<St("x", widx, 0, TORN)>>)
    /\ wpc' = "copy_end"
    /\ UNCHANGED <<widx, wmsg>> /\ UNCHANGED readers

CopyEnd ==
    /\ wpc = "copy_end"
    /\ Store(<<St("x", widx, 0, wmsg)>>)
    /\ wpc' = IF F("reset_first") \/ F("publish_first") THEN "publish" ELSE "reset"
    /\ UNCHANGED <<widx, wmsg>> /\ UNCHANGED readers

ResetFlags ==
    /\ wpc = "reset"
    /\ Store([q \in 1..R |-> St("d", widx, q, 0)])
    /\ wpc' = IF F("reset_first") THEN "copy_begin" ELSE IF F("publish_first") THEN "next"
              ELSE IF Weak /\ "publish" \in Fences THEN "fence" ELSE "publish"
    /\ UNCHANGED <<widx, wmsg>> /\ UNCHANGED readers

Publish ==
    /\ wpc = "publish"
    /\ Store(<<St("w", widx, 0, 1)>>)
    /\ wpc' = IF F("publish_first") /\ ~F("reset_first") THEN "reset" ELSE "next"
    /\ UNCHANGED <<widx, wmsg>> /\ UNCHANGED readers

Advance ==
    /\ wpc = "next"
    /\ widx' = (widx + 1) % S /\ wmsg' = wmsg + 1 /\ wpc' = "idle"
    /\ UNCHANGED <<written, done, data, wbuf>> /\ UNCHANGED readers

Acquire(r) ==
    /\ rpc[r] = "check" /\ Len(rgot[r]) < M
    /\ written[ridx[r]] = 1 /\ done[ridx[r]][r] = 0
    /\ IF F("early_release")
         THEN /\ done' = [done EXCEPT ![ridx[r]][r] = 1]
              /\ rpc' = [rpc EXCEPT ![r] = "read_late"]
         ELSE /\ rpc' = [rpc EXCEPT ![r] = "read"]
              /\ UNCHANGED done
    /\ UNCHANGED <<written, data, wpc, widx, wmsg, ridx, rhold, rgot, wbuf>>

Read(r) ==
    /\ rpc[r] \in {"read", "read_late"}
    /\ rgot' = [rgot EXCEPT ![r] = Append(@, data[ridx[r]])]
    /\ IF rpc[r] = "read_late"
         THEN /\ rpc' = [rpc EXCEPT ![r] = "check"]
              /\ ridx' = [ridx EXCEPT ![r] = (@ + 1) % S]
              /\ rhold' = [rhold EXCEPT ![r] = EMPTY]
         ELSE /\ rpc' = [rpc EXCEPT ![r] = "release"]
              /\ rhold' = [rhold EXCEPT ![r] = data[ridx[r]]]
              /\ UNCHANGED ridx
    /\ UNCHANGED <<written, done, data, wpc, widx, wmsg, wbuf>>

Release(r) ==
    /\ rpc[r] = "release"
    /\ done' = [done EXCEPT ![ridx[r]][r] = 1]
    /\ rpc' = [rpc EXCEPT ![r] = "check"]
    /\ ridx' = [ridx EXCEPT ![r] = (@ + 1) % S]
    /\ rhold' = [rhold EXCEPT ![r] = EMPTY]
    /\ UNCHANGED <<written, data, wpc, widx, wmsg, rgot, wbuf>>

Next ==
    \/ Claim \/ CopyBegin \/ CopyEnd \/ ResetFlags \/ Publish \/ Advance
    \/ FenceClaim \/ FencePublish \/ Drain
    \/ \E r \in Rdrs : Acquire(r) \/ Read(r) \/ Release(r)

Spec == Init /\ [][Next]_vars

(* NRR: no reader read a slot mid-copy, and a reader's held bytes are still the slot's *)
NRR ==
    \A r \in Rdrs :
        /\ Len(rgot[r]) > 0 => rgot[r][Len(rgot[r])] # TORN
        /\ rpc[r] = "release" => rhold[r] = data[ridx[r]]

(* FIFO: every reader received 0, 1, 2, ... in order, none lost or twice *)
Clean(r) == SelectSeq(rgot[r], LAMBDA m : m # TORN)
FIFO == \A r \in Rdrs : \A i \in 1..Len(Clean(r)) : Clean(r)[i] = i - 1
=============================================================================
