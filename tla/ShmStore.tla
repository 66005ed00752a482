---------------------------- MODULE ShmStore ----------------------------
(***************************************************************************)
(* One writer and N readers of the single-writer / multi-reader           *)
(* shared-memory object store (SEMANTICS.md), one action per atomic step. *)
(*                                                                         *)
(* First slice (issue 4): every chunk occupies one of Slots ring slots, so *)
(* allocation is FIFO over slots and a reclaimed slot is reused by the     *)
(* next put; ids are absolute allocation counters modulo IdMod.  Action    *)
(* names are the model's atomic steps (shmspec/model/steps.py).            *)
(*                                                                         *)
(* Reader protocols (the model's profiles):                                *)
(*   Hardened = FALSE  vLLM 0.11-0.33: reader_check compares the id in the *)
(*     slot's header, deserialize reads the slot in place, then            *)
(*     counter_increment under the lock.                                    *)
(*   Hardened = TRUE   impl/: reader_check against the published window    *)
(*     [absStart, absEnd), payload_read copies, reader_check again, then   *)
(*     counter_increment under the lock (atomic with the writer's          *)
(*     free_step and clear: the reclaim fence), deserialize the copy.       *)
(* ReadOnce: the client protocol (each reader reads each handle at most    *)
(* once).  ClearResets: clear() resets ids to 0 (vLLM < 0.32).              *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS Readers, Slots, IdMod, MaxPuts, MaxReads, Hardened, ReadOnce, ClearResets

NoObj == 0
Objs == 1..MaxPuts

VARIABLES
    mem,        \* slot -> [id, obj, count]: the shared bytes of each slot
    absStart,   \* published: oldest live allocation (absolute counter)
    absEnd,     \* published: next allocation
    idBase,     \* absolute counter that has id 0 (moves on a resetting clear)
    puts,       \* objects put so far (object tags 1..puts)
    issued,     \* set of handles [abs, id, obj] the writer handed out
    pc,         \* reader -> "idle" | "checked" | "copied" | "rechecked" | "counted"
    hd,         \* reader -> the handle it is reading
    copy,       \* reader -> object bytes copied (Hardened) or NoObj
    got,        \* reader -> object deserialized in its current get, or NoObj
    read,       \* reader -> set of handles it has read (ReadOnce)
    starts      \* abs -> gets started against it (history variable, for RC)

vars == <<mem, absStart, absEnd, idBase, puts, issued, pc, hd, copy, got, read, starts>>

Slot(a) == a % Slots
IdOf(a) == (a - idBase) % IdMod
NoHandle == [abs |-> 0, id |-> 0, obj |-> NoObj]
Handles == [abs : 0..MaxPuts, id : 0..(IdMod - 1), obj : 0..MaxPuts]

TypeOK ==
    /\ mem \in [0..(Slots - 1) -> [id : 0..(IdMod - 1), obj : 0..MaxPuts, count : 0..MaxReads]]
    /\ starts \in [0..MaxPuts -> 0..MaxReads]
    /\ absStart \in 0..MaxPuts /\ absEnd \in 0..MaxPuts /\ absStart <= absEnd
    /\ puts \in 0..MaxPuts
    /\ issued \subseteq Handles
    /\ pc \in [Readers -> {"idle", "checked", "copied", "rechecked", "counted"}]
    /\ hd \in [Readers -> Handles] /\ copy \in [Readers -> 0..MaxPuts] /\ got \in [Readers -> 0..MaxPuts]

Init ==
    /\ mem = [s \in 0..(Slots - 1) |-> [id |-> 0, obj |-> NoObj, count |-> 0]]
    /\ absStart = 0 /\ absEnd = 0 /\ idBase = 0 /\ puts = 0 /\ issued = {}
    /\ pc = [r \in Readers |-> "idle"] /\ hd = [r \in Readers |-> NoHandle]
    /\ copy = [r \in Readers |-> NoObj] /\ got = [r \in Readers |-> NoObj]
    /\ read = [r \in Readers |-> {}]
    /\ starts = [a \in 0..MaxPuts |-> 0]

Live(a) == absStart <= a /\ a < absEnd
NReaders == Cardinality(Readers)

(* ---------------------------------------------------------- the writer *)
\* header_write, payload_write and publish as one step in this slice; it is
\* named after the step at which the chunk becomes visible to readers
publish ==
    /\ puts < MaxPuts /\ absEnd < MaxPuts
    /\ absEnd - absStart < Slots
    /\ LET a == absEnd IN
       /\ mem' = [mem EXCEPT ![Slot(a)] = [id |-> IdOf(a), obj |-> puts + 1, count |-> 0]]
       /\ issued' = issued \cup {[abs |-> a, id |-> IdOf(a), obj |-> puts + 1]}
    /\ absEnd' = absEnd + 1 /\ puts' = puts + 1
    /\ UNCHANGED <<absStart, idBase, pc, hd, copy, got, read, starts>>

\* free_step: FIFO, only when every reader counted the oldest chunk (RC)
free_step ==
    /\ absStart < absEnd
    /\ mem[Slot(absStart)].count >= NReaders
    /\ absStart' = absStart + 1
    /\ UNCHANGED <<mem, absEnd, idBase, puts, issued, pc, hd, copy, got, read, starts>>

clear ==
    /\ absStart < absEnd
    /\ IF ClearResets
       THEN /\ idBase' = absEnd          \* the next chunk gets id 0 again
       ELSE /\ UNCHANGED idBase
    /\ absStart' = absEnd
    /\ UNCHANGED <<mem, absEnd, puts, issued, pc, hd, copy, got, read, starts>>

(* --------------------------------------------------------- the readers *)
Start(r, h) ==
    /\ pc[r] = "idle"
    /\ ~ReadOnce \/ h \notin read[r]
    /\ starts[h.abs] < MaxReads
    /\ starts' = [starts EXCEPT ![h.abs] = @ + 1]
    /\ hd' = [hd EXCEPT ![r] = h] /\ got' = [got EXCEPT ![r] = NoObj] /\ copy' = [copy EXCEPT ![r] = NoObj]
    /\ read' = [read EXCEPT ![r] = read[r] \cup {h}]

Stale(r) == pc' = [pc EXCEPT ![r] = "idle"]

\* the first reader_check, of handle h
FirstCheck(r, h) ==
    /\ Start(r, h)
    /\ IF (IF Hardened THEN Live(h.abs) ELSE mem[Slot(h.abs)].id = h.id)
       THEN pc' = [pc EXCEPT ![r] = "checked"]
       ELSE Stale(r)
    /\ UNCHANGED <<mem, absStart, absEnd, idBase, puts, issued>>

\* payload_read (Hardened: copy out; vLLM: deserialize in place)
payload_read(r) ==
    /\ pc[r] = "checked"
    /\ IF Hardened
       THEN /\ copy' = [copy EXCEPT ![r] = mem[Slot(hd[r].abs)].obj] /\ UNCHANGED got
       ELSE /\ got' = [got EXCEPT ![r] = mem[Slot(hd[r].abs)].obj] /\ UNCHANGED copy
    /\ pc' = [pc EXCEPT ![r] = "copied"]
    /\ UNCHANGED <<mem, absStart, absEnd, idBase, puts, issued, hd, read, starts>>

\* reader_check again after the copy (Hardened only)
Recheck(r) ==
    /\ pc[r] = "copied"
    /\ IF ~Hardened \/ Live(hd[r].abs) THEN pc' = [pc EXCEPT ![r] = "rechecked"] ELSE Stale(r)
    /\ UNCHANGED <<mem, absStart, absEnd, idBase, puts, issued, hd, copy, got, read, starts>>

\* counter_increment under the reader lock (Hardened: with its liveness check)
counter_increment(r) ==
    /\ pc[r] = "rechecked"
    /\ IF Hardened /\ ~Live(hd[r].abs)
       THEN /\ Stale(r) /\ UNCHANGED mem
       ELSE /\ mem' = [mem EXCEPT ![Slot(hd[r].abs)].count = @ + 1]
            /\ pc' = [pc EXCEPT ![r] = IF Hardened THEN "counted" ELSE "idle"]
    /\ UNCHANGED <<absStart, absEnd, idBase, puts, issued, hd, copy, got, read, starts>>

\* deserialize the private copy (Hardened)
deserialize(r) ==
    /\ pc[r] = "counted"
    /\ got' = [got EXCEPT ![r] = copy[r]]
    /\ pc' = [pc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<mem, absStart, absEnd, idBase, puts, issued, hd, copy, read, starts>>

\* every liveness / id check of a reader: the first one, and the one after the copy
reader_check(r) == (\E h \in issued : FirstCheck(r, h)) \/ Recheck(r)

\* the spec's actions are the model's atomic steps (shmspec/model/steps.py)
Next ==
    \/ publish \/ free_step \/ clear
    \/ \E r \in Readers :
         \/ reader_check(r) \/ payload_read(r) \/ counter_increment(r) \/ deserialize(r)

Spec == Init /\ [][Next]_vars

\* readers are interchangeable (sound: no action or property names a reader)
Symmetry == Permutations(Readers)

(* --------------------------------------------------------- properties *)
\* NRR: whatever a reader deserialized is the object put under its handle
NRR == \A r \in Readers : got[r] \in {NoObj, hd[r].obj}

\* FIFO / DISJ in slot form: at most Slots live chunks, reclaimed oldest first
DISJ == absEnd - absStart <= Slots

\* RC: a live chunk's count never exceeds the readers that started a get of it
RC == \A a \in absStart..(absEnd - 1) : mem[Slot(a)].count <= starts[a]
=============================================================================
