---------------------------- MODULE Slots ----------------------------
(* The slot-flag protocol of vLLM's MessageQueue ring and ShmTensorArena
   (docs/slots.md), at the atomicity of model/slots.py: the claim, the copy's
   start and end, the flag reset, the publish, a reader's acquire, read and
   release are one action each, sequentially consistent.  Its variables are
   the model's, one for one, so TLC's distinct states equal the model's BFS
   count (tests/conformance/spec/test_slots_tla.py).  Faults: the model's
   wrong orders (Config.faults). *)
EXTENDS Integers, Sequences

CONSTANTS R, S, M, Faults

TORN == -2
EMPTY == -1
Slots == 0..(S - 1)
Rdrs == 1..R

VARIABLES written, done, data, wpc, widx, wmsg, rpc, ridx, rhold, rgot
vars == <<written, done, data, wpc, widx, wmsg, rpc, ridx, rhold, rgot>>
readers == <<rpc, ridx, rhold, rgot>>

Init ==
    /\ written = [s \in Slots |-> 0]
    /\ done = [s \in Slots |-> [r \in Rdrs |-> 0]]
    /\ data = [s \in Slots |-> EMPTY]
    /\ wpc = "idle" /\ widx = 0 /\ wmsg = 0
    /\ rpc = [r \in Rdrs |-> "check"]
    /\ ridx = [r \in Rdrs |-> 0]
    /\ rhold = [r \in Rdrs |-> EMPTY]
    /\ rgot = [r \in Rdrs |-> <<>>]

F(x) == x \in Faults

Claim ==
    /\ wpc = "idle" /\ wmsg < M
    /\ \/ written[widx] = 0
       \/ \A r \in Rdrs : done[widx][r] = 1
       \/ F("free_ignores_readers")
    /\ wpc' = IF F("reset_first") THEN "reset" ELSE "copy_begin"
    /\ written' = IF F("no_claim") THEN written ELSE [written EXCEPT ![widx] = 0]
    /\ UNCHANGED <<done, data, widx, wmsg>> /\ UNCHANGED readers

CopyBegin ==
    /\ wpc = "copy_begin"
    /\ data' = [data EXCEPT ![widx] = TORN]
    /\ wpc' = "copy_end"
    /\ UNCHANGED <<written, done, widx, wmsg>> /\ UNCHANGED readers

CopyEnd ==
    /\ wpc = "copy_end"
    /\ data' = [data EXCEPT ![widx] = wmsg]
    /\ wpc' = IF F("reset_first") \/ F("publish_first") THEN "publish" ELSE "reset"
    /\ UNCHANGED <<written, done, widx, wmsg>> /\ UNCHANGED readers

ResetFlags ==
    /\ wpc = "reset"
    /\ done' = [done EXCEPT ![widx] = [r \in Rdrs |-> 0]]
    /\ wpc' = IF F("reset_first") THEN "copy_begin" ELSE IF F("publish_first") THEN "next" ELSE "publish"
    /\ UNCHANGED <<written, data, widx, wmsg>> /\ UNCHANGED readers

Publish ==
    /\ wpc = "publish"
    /\ written' = [written EXCEPT ![widx] = 1]
    /\ wpc' = IF F("publish_first") /\ ~F("reset_first") THEN "reset" ELSE "next"
    /\ UNCHANGED <<done, data, widx, wmsg>> /\ UNCHANGED readers

Advance ==
    /\ wpc = "next"
    /\ widx' = (widx + 1) % S /\ wmsg' = wmsg + 1 /\ wpc' = "idle"
    /\ UNCHANGED <<written, done, data>> /\ UNCHANGED readers

Acquire(r) ==
    /\ rpc[r] = "check" /\ Len(rgot[r]) < M
    /\ written[ridx[r]] = 1 /\ done[ridx[r]][r] = 0
    /\ IF F("early_release")
         THEN /\ done' = [done EXCEPT ![ridx[r]][r] = 1]
              /\ rpc' = [rpc EXCEPT ![r] = "read_late"]
         ELSE /\ rpc' = [rpc EXCEPT ![r] = "read"]
              /\ UNCHANGED done
    /\ UNCHANGED <<written, data, wpc, widx, wmsg, ridx, rhold, rgot>>

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
    /\ UNCHANGED <<written, done, data, wpc, widx, wmsg>>

Release(r) ==
    /\ rpc[r] = "release"
    /\ done' = [done EXCEPT ![ridx[r]][r] = 1]
    /\ rpc' = [rpc EXCEPT ![r] = "check"]
    /\ ridx' = [ridx EXCEPT ![r] = (@ + 1) % S]
    /\ rhold' = [rhold EXCEPT ![r] = EMPTY]
    /\ UNCHANGED <<written, data, wpc, widx, wmsg, rgot>>

Next ==
    \/ Claim \/ CopyBegin \/ CopyEnd \/ ResetFlags \/ Publish \/ Advance
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
