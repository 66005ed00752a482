---------------------------- MODULE ShmStore ----------------------------
(***************************************************************************)
(* One writer and N readers of the single-writer / multi-reader           *)
(* shared-memory object store (SEMANTICS.md), one action per atomic step. *)
(* Action names are the model's atomic steps (shmspec/model/steps.py), and *)
(* shmspec/model/atomic.py is the same transition system in Python: `shmspec *)
(* model` enumerates both and compares their state sets.  Steps are        *)
(* sequentially consistent: a fence is what makes a real store's steps     *)
(* behave so, and the constant Fenced takes the reader's fence away.       *)
(*                                                                         *)
(* Units: one unit is 8 bytes, the size of a chunk header, so a chunk of   *)
(* size n (header included) holds n - 1 units of payload.  Addresses are   *)
(* virtual (they may exceed RingUnits; the physical unit is a % RingUnits). *)
(* Ids are modulo IdMod (2**31 in the store; small here so that            *)
(* wraparound is reached).                                                 *)
(*                                                                         *)
(* Shared memory is one cell per unit: a header cell holds the chunk's id, *)
(* size and reader_count, a payload cell the tag of the object whose bytes *)
(* it holds (object tag = allocation number + 1).  A reader that reads     *)
(* cells holding more than one tag deserializes Garbage.                   *)
(*                                                                         *)
(* Reader protocols (the model's profiles):                                *)
(*   Hardened = FALSE  vLLM 0.11-0.33: reader_check compares the handle's  *)
(*     id with the header in shared memory; payload_read deserializes the  *)
(*     bytes in place; counter_increment (under the lock) adds one to      *)
(*     whatever reader_count now sits at the handle's address.  The        *)
(*     writer's put is header_write (allocation and header),              *)
(*     payload_write, publish.                                             *)
(*   Hardened = TRUE   impl/, segment v2 (docs/impl-protocol.md): a get is *)
(*     pin (the reader publishes its hazard pin on the handle's allocation *)
(*     and fences), reader_check (live in [pubStart, pubEnd), or a chunk of *)
(*     the latest clear's drain window [drainLo, drainHi) whose bytes no   *)
(*     allocation since reached: address % B >= drainHw; and the header's  *)
(*     id), deserialize (in place, under the pin), counter_increment (the  *)
(*     reader's own ack of a chunk that was live at the check), unpin (the *)
(*     pin released; a failed check or a drain read releases it there).    *)
(*     free_unused is one free_step per chunk it plans (each checks the    *)
(*     next chunk), then retire (they go at once).  A put is pin_scan (plan the *)
(*     allocation, publish what it kills: drainHw, drainLo; fence; read    *)
(*     the pins), pin_wait (the writer is blocked while a pin it found     *)
(*     names a chunk that is no longer live), header_write, payload_write, *)
(*     publish (the chunk joins the ring; pubEnd).  A chunk is free when   *)
(*     every reader acknowledged it (one promise per put).  clear opens    *)
(*     the drain window [pubStart, pubEnd) with drainHw = 0 and publishes  *)
(*     pubStart = pubEnd.                                                  *)
(* ReadOnce:    clients keep the read-once protocol (each reader reads a   *)
(*              handle at most once).                                      *)
(* ClearResets: clear() resets ids to 0 (vLLM < 0.32).                     *)
(* MaxChunks:   impl's K: at most K chunks are live, allocation k          *)
(*              acknowledges in ack word k % K of each reader, re-based    *)
(*              when a later allocation takes the word over, and a drain   *)
(*              chunk K allocations old is dropped (Hardened only).        *)
(* Fenced:      impl's reader fences between its pin and its check.        *)
(*              FALSE models the missing fence: the check's loads of the   *)
(*              control block are served before the pin store is visible  *)
(*              (x86-64 lets loads pass an earlier store): the pin step    *)
(*              takes the verdict, the pin shows only at the check.        *)
(* ScanPins:    impl's writer scans the pins and waits (FALSE: it does not). *)
(* WriterFenced: impl's writer fences between publishing what a put kills  *)
(*              (the drain window) and reading the pins.  FALSE models the *)
(*              missing fence: the scan's loads of the pins are served     *)
(*              before the drain store is visible, so the pins are read at *)
(*              pin_scan and the drain shows only at header_write.         *)
(* Mortal:      readers whose process may die anywhere (die(r), a fault):  *)
(*              impl's writer forfeits a dead reader's promised reads and  *)
(*              ends a wait for its pin; vLLM's count never gets its read. *)
(***************************************************************************)
EXTENDS Naturals, Integers, Sequences, FiniteSets, TLC

CONSTANTS
    Readers,      \* reader processes (model values)
    RingUnits,    \* ring size B, in units of 8 bytes
    Sizes,        \* chunk sizes a put may take, in units, header included (each >= 2)
    Keys,         \* object keys (model values)
    IdMod,        \* ids are modulo IdMod
    MaxPuts,      \* bound on allocations (state constraint)
    MaxReads,     \* bound on gets per reader and handle
    Hardened, ReadOnce, ClearResets,
    MaxChunks,    \* impl's live-chunk bound K (Hardened)
    Fenced,       \* impl's reader fence (Hardened)
    ScanPins,     \* impl's writer pin scan (Hardened)
    WriterFenced, \* impl's writer fence between its drain store and its pin scan (Hardened)
    Mortal        \* readers whose process may die (SIGKILL): a fault, {} in the usual configs

NoObj   == 0      \* nothing deserialized (yet)
Garbage == -1     \* bytes of more than one object

VARIABLES
    start, end,   \* the writer's ring pointers (virtual units)
    idStart,      \* id of the oldest live chunk
    idEnd,        \* id the next chunk gets
    chunks,       \* live chunks, oldest first: [abs, addr, size, id, key]
    mem,          \* physical unit -> [id, size, cnt, obj]
    wpc,          \* the writer: "idle" | "wait" | "ready" | "header" | "payload" | "freeing" | "retire"
    pubStart,     \* published window of absolute allocation counters
    pubEnd,       \*   (impl's control block; readers of vLLM ignore it)
    puts,         \* allocations so far (absolute counter)
    issued,       \* handles handed to clients: [abs, addr, id, obj]
    clearAt,      \* history: allocations before the last clear (CLR)
    pend,         \* Hardened: <<the chunk being put>> from pin_scan to publish, else <<>>
    wwait,        \* Hardened: readers whose pin on a chunk no longer live the writer waits for
    planned,      \* Hardened: chunks the running free_unused planned to reclaim
    drainLo, drainHi, drainHw,  \* Hardened: the drain window of the latest clear
    pc,           \* reader -> "idle" | "pinned" | "checked" | "read" | "acked" | "dead"
    hd,           \* reader -> the handle of its current get
    hsz,          \* reader -> the chunk size it read from the header
    got,          \* reader -> what its current get deserialized
    floor,        \* reader -> clearAt when its current get started (CLR)
    starts,       \* reader -> abs -> gets started (history, for RC)
    pins,         \* Hardened: reader -> 0, or 1 + the allocation its pin names, as the writer sees it
    verdict,      \* Hardened: reader -> what its check of the control block found:
                  \*   "none" | "live" | "drain" | "stale"
    acks          \* Hardened: reader -> abs -> reads acknowledged for that allocation

writerVars == <<start, end, idStart, idEnd, chunks, wpc, pubStart, pubEnd, puts, issued, clearAt,
                pend, drainLo, drainHi, drainHw, planned>>
readerVars == <<pc, hd, hsz, got, floor, starts, pins, verdict, acks>>
vars == <<writerVars, mem, wwait, readerVars>>

NReaders == Cardinality(Readers)
Abs == 0..(MaxPuts - 1)
Ids == 0..(IdMod - 1)
Units == 0..(RingUnits - 1)
Objs == {Garbage, NoObj} \cup 1..MaxPuts
NoHandle == [abs |-> 0, addr |-> 0, id |-> 0, obj |-> NoObj]
Handle == [abs : Abs, addr : 0..(2 * RingUnits), id : Ids, obj : 1..MaxPuts]
Chunk == [abs : Abs, addr : 0..(2 * RingUnits), size : Sizes, id : Ids, key : Keys]
Cell == [id : Ids, size : 0..RingUnits, cnt : 0..(NReaders * MaxReads * MaxPuts), obj : {NoObj} \cup 1..MaxPuts]
Max(a, b) == IF a >= b THEN a ELSE b

RECURSIVE SumOver(_, _)
SumOver(f, S) == IF S = {} THEN 0 ELSE LET x == CHOOSE y \in S : TRUE IN f[x] + SumOver(f, S \ {x})

TypeOK ==
    /\ start \in 0..RingUnits /\ end \in 0..(2 * RingUnits) /\ start <= end
    /\ idStart \in Ids /\ idEnd \in Ids /\ puts \in 0..MaxPuts /\ clearAt \in 0..MaxPuts
    /\ \A i \in DOMAIN chunks : chunks[i] \in Chunk
    /\ mem \in [Units -> Cell]
    /\ wpc \in {"idle", "wait", "ready", "header", "payload", "freeing", "retire"} /\ planned \in 0..MaxPuts
    /\ pubStart \in 0..MaxPuts /\ pubEnd \in 0..MaxPuts /\ issued \subseteq Handle
    /\ pend \in Seq(Chunk) /\ Len(pend) <= 1 /\ wwait \subseteq Readers
    /\ drainLo \in 0..MaxPuts /\ drainHi \in 0..MaxPuts /\ drainHw \in 0..RingUnits
    /\ pc \in [Readers -> {"idle", "pinned", "checked", "read", "acked", "dead"}] /\ Mortal \subseteq Readers
    /\ hd \in [Readers -> Handle \cup {NoHandle}] /\ hsz \in [Readers -> 0..RingUnits]
    /\ got \in [Readers -> Objs] /\ floor \in [Readers -> 0..MaxPuts]
    /\ starts \in [Readers -> [Abs -> 0..MaxReads]]
    /\ pins \in [Readers -> 0..MaxPuts] /\ verdict \in [Readers -> {"none", "live", "drain", "stale"}]
    /\ acks \in [Readers -> [Abs -> 0..(MaxReads * MaxPuts)]]

Init ==
    /\ start = 0 /\ end = 0 /\ idStart = 0 /\ idEnd = 0 /\ chunks = <<>>
    /\ mem = [u \in Units |-> [id |-> 0, size |-> 0, cnt |-> 0, obj |-> NoObj]]
    /\ wpc = "idle" /\ pubStart = 0 /\ pubEnd = 0 /\ puts = 0 /\ issued = {} /\ clearAt = 0
    /\ pend = <<>> /\ wwait = {} /\ drainLo = 0 /\ drainHi = 0 /\ drainHw = 0 /\ planned = 0
    /\ pc = [r \in Readers |-> "idle"] /\ hd = [r \in Readers |-> NoHandle]
    /\ hsz = [r \in Readers |-> 0] /\ got = [r \in Readers |-> NoObj] /\ floor = [r \in Readers |-> 0]
    /\ starts = [r \in Readers |-> [a \in Abs |-> 0]]
    /\ pins = [r \in Readers |-> 0] /\ verdict = [r \in Readers |-> "none"]
    /\ acks = [r \in Readers |-> [a \in Abs |-> 0]]

Phys(a) == a % RingUnits
LiveKeys == {chunks[i].key : i \in DOMAIN chunks}
Last == chunks[Len(chunks)]
\* the chunk being put: vLLM's joins the ring at header_write, impl's at publish
Cur == IF Hardened THEN pend[1] ELSE Last

(* ---------------------------------------------------------- the writer *)
\* where n units go (model/ring.py plan_allocation): jump to the next
\* multiple of RingUnits when the chunk would not sit contiguously at the tail
Place(n) == IF (end % RingUnits) + n > RingUnits THEN (end \div RingUnits + 1) * RingUnits ELSE end
\* a put of n units for key k may start (DUP: not a live key; OOM: room after
\* the jump; impl: fewer than MaxChunks chunks live)
CanPut(k, n) ==
    /\ wpc = "idle" /\ puts < MaxPuts
    /\ k \notin LiveKeys
    /\ Place(n) + n - start <= RingUnits
    /\ Hardened => Len(chunks) < MaxChunks

\* Hardened, put step 1: plan the allocation; publish what it kills (the
\* bytes below its end, in the drain window while one is open; once every
\* byte is reached the window closes); fence; read the pins: the writer
\* waits for every pin on a chunk that is no longer live (reclaimed, or a
\* drain read).  A drain read is never acknowledged, so a drain chunk needs
\* no protection of its ack word.
DrainKill(a, n) ==
    IF drainLo < drainHi
    THEN IF Phys(a) + n >= RingUnits THEN drainLo' = drainHi /\ drainHw' = 0
         ELSE drainLo' = drainLo /\ drainHw' = Max(drainHw, Phys(a) + n)
    ELSE UNCHANGED <<drainLo, drainHw>>

pin_scan(k, n) ==
    /\ Hardened /\ CanPut(k, n)
    /\ LET a == Place(n)
       IN /\ pend' = <<[abs |-> puts, addr |-> a, size |-> n, id |-> idEnd, key |-> k]>>
          /\ IF WriterFenced THEN DrainKill(a, n) ELSE UNCHANGED <<drainLo, drainHw>>
    /\ wwait' = IF ScanPins THEN {r \in Readers : pins[r] # 0 /\ pins[r] - 1 < pubStart} ELSE {}
    /\ wpc' = IF wwait' = {} THEN "ready" ELSE "wait"
    /\ UNCHANGED <<planned, start, end, idStart, idEnd, chunks, pubStart, pubEnd, puts, issued, clearAt, drainHi,
                   mem, readerVars>>

\* Hardened: the writer proceeds once every pin it waits for has changed
\* (a reader's next pin carries a new sequence number, so any store does)
\* (or its reader died: impl's wait ends when the reader's slot is released)
pin_wait ==
    /\ Hardened /\ wpc = "wait" /\ \A r \in wwait : pc[r] = "dead"
    /\ wpc' = "ready" /\ wwait' = {}
    /\ UNCHANGED <<planned, start, end, idStart, idEnd, chunks, pubStart, pubEnd, puts, issued, clearAt, pend,
                   drainLo, drainHi, drainHw, mem, readerVars>>

\* put, the chunk's [id][chunk_size] header: vLLM allocates here (DUP, OOM,
\* the wrap jump); impl writes the header of the allocation pin_scan planned
\* (an unfenced writer's drain store becomes visible here, with the header)
header_write(k, n) ==
    IF Hardened
    THEN /\ wpc = "ready" /\ k = pend[1].key /\ n = pend[1].size
         /\ mem' = [mem EXCEPT ![Phys(pend[1].addr)].id = pend[1].id, ![Phys(pend[1].addr)].size = n]
         /\ wpc' = "header"
         /\ IF WriterFenced THEN UNCHANGED <<drainLo, drainHw>> ELSE DrainKill(pend[1].addr, n)
         /\ UNCHANGED <<planned, start, end, idStart, idEnd, chunks, pubStart, pubEnd, puts, issued, clearAt, pend,
                        drainHi, wwait, readerVars>>
    ELSE /\ CanPut(k, n)
         /\ LET a == Place(n) IN
            /\ chunks' = Append(chunks, [abs |-> puts, addr |-> a, size |-> n, id |-> idEnd, key |-> k])
            /\ mem' = [mem EXCEPT ![Phys(a)].id = idEnd, ![Phys(a)].size = n]
            /\ end' = a + n
         /\ idEnd' = (idEnd + 1) % IdMod
         /\ puts' = puts + 1 /\ wpc' = "header"
         /\ UNCHANGED <<planned, start, idStart, pubStart, pubEnd, issued, clearAt, pend, drainLo, drainHi, drainHw,
                        wwait, readerVars>>

\* put: [reader_count = 0][metadata][data]
payload_write ==
    /\ wpc = "header"
    /\ LET p == Phys(Cur.addr) IN
       mem' = [u \in Units |->
                 IF u = p THEN [mem[u] EXCEPT !.cnt = 0]
                 ELSE IF p < u /\ u < p + Cur.size THEN [mem[u] EXCEPT !.obj = Cur.abs + 1]
                 ELSE mem[u]]
    /\ wpc' = "payload"
    /\ UNCHANGED <<planned, start, end, idStart, idEnd, chunks, pubStart, pubEnd, puts, issued, clearAt, pend,
                   drainLo, drainHi, drainHw, wwait, readerVars>>

\* put, last step: the handle is returned and the window published (impl:
\* the chunk joins the writer's ring and abs_end is published)
publish ==
    /\ wpc = "payload"
    /\ issued' = issued \cup {[abs |-> Cur.abs, addr |-> Cur.addr, id |-> Cur.id, obj |-> Cur.abs + 1]}
    /\ pubEnd' = Cur.abs + 1
    /\ wpc' = "idle"
    /\ IF Hardened
       THEN /\ chunks' = Append(chunks, pend[1]) /\ end' = pend[1].addr + pend[1].size
            /\ idEnd' = (idEnd + 1) % IdMod /\ puts' = puts + 1 /\ pend' = <<>>
       ELSE UNCHANGED <<chunks, end, idEnd, puts, pend>>
    /\ UNCHANGED <<planned, start, idStart, pubStart, clearAt, drainLo, drainHi, drainHw, mem, wwait, readerVars>>

\* the reads of live chunk i are complete (RC: vLLM's reader_count >=
\* writer_count * n_readers; impl: every live reader's ack >= writer_count,
\* a dead reader's promised reads forfeited; the spec makes one promise per
\* put)
Reclaimable(i) ==
    IF Hardened THEN \A r \in Readers : pc[r] = "dead" \/ acks[r][chunks[i].abs] >= 1
    ELSE mem[Phys(chunks[i].addr)].cnt >= NReaders

\* bytes one free_unused reclaims at most: the store's loop goes on to the
\* next chunk only while fewer are freed (impl and vLLM: 2 * max_object_size,
\* which a recorded run's check sets, tla/ShmStoreTrace.tla); RingUnits, as
\* here, never stops a reclaim (the live chunks hold at most that much)
FreeBound == RingUnits
\* units the oldest n live chunks hold
Freed(n) == SumOver([i \in 1..n |-> chunks[i].size], 1..n)

\* FIFO free (model/ring.py free).  vLLM: one iteration of the free loop, the
\* oldest chunk goes once its reads are complete.  impl: free_unused plans
\* the chunks it reclaims, oldest first, one free_step each: a free_step
\* plans one chunk and checks the next; while that one is reclaimable when
\* the loop gets there (and fewer than FreeBound units are planned) the
\* next free_step plans it, else the reclaim goes on to retire; planned
\* counts those planned before
free_step ==
    IF Hardened
    THEN /\ \/ wpc = "idle" /\ chunks # <<>> /\ Reclaimable(1)
            \/ wpc = "freeing"
         /\ LET n == planned + 1 IN
            /\ planned' = n
            /\ wpc' = IF n < Len(chunks) /\ Freed(n) < FreeBound /\ Reclaimable(n + 1)
                      THEN "freeing" ELSE "retire"
         /\ UNCHANGED <<start, end, idStart, chunks, pubStart, idEnd, pubEnd, puts, issued, clearAt, pend,
                        drainLo, drainHi, drainHw, mem, wwait, readerVars>>
    ELSE /\ wpc = "idle" /\ chunks # <<>>
         /\ Head(chunks).id = idStart
         /\ Reclaimable(1)
         /\ chunks' = Tail(chunks)
         /\ idStart' = (idStart + 1) % IdMod
         /\ LET rest == Tail(chunks)
                s1 == start + ((Head(rest).addr - start) % RingUnits)
            IN IF rest # <<>> /\ Head(rest).id = (idStart + 1) % IdMod
               THEN IF s1 >= RingUnits
                    THEN start' = s1 - RingUnits /\ end' = end - RingUnits
                    ELSE start' = s1 /\ end' = end
               ELSE start' = 0 /\ end' = 0
         /\ pubStart' = Head(chunks).abs + 1
         /\ UNCHANGED <<idEnd, wpc, pubEnd, puts, issued, clearAt, pend, drainLo, drainHi, drainHw, mem, wwait,
                        planned, readerVars>>

\* impl: the planned chunks retire at once (the writer's ring, then
\* abs_start published)
retire ==
    /\ Hardened /\ wpc = "retire"
    /\ LET n == planned IN
       /\ chunks' = SubSeq(chunks, n + 1, Len(chunks))
       /\ idStart' = (idStart + n) % IdMod
       /\ pubStart' = chunks[n].abs + 1
       /\ IF n < Len(chunks)
          THEN LET s1 == start + ((chunks[n + 1].addr - start) % RingUnits) IN
               IF s1 >= RingUnits
               THEN start' = s1 - RingUnits /\ end' = end - RingUnits
               ELSE start' = s1 /\ end' = end
          ELSE start' = 0 /\ end' = 0
    /\ planned' = 0 /\ wpc' = "idle"
    /\ UNCHANGED <<idEnd, pubEnd, puts, issued, clearAt, pend, drainLo, drainHi, drainHw, mem, wwait, readerVars>>

\* drop every chunk; ids reset to 0 before vLLM 0.32, kept after; impl opens
\* the drain window of the dropped chunks
clear ==
    /\ wpc = "idle"
    /\ chunks' = <<>> /\ start' = 0 /\ end' = 0
    /\ IF ClearResets THEN idStart' = 0 /\ idEnd' = 0 ELSE idStart' = idEnd /\ UNCHANGED idEnd
    /\ pubStart' = puts /\ clearAt' = puts
    /\ IF Hardened THEN drainLo' = pubStart /\ drainHi' = puts /\ drainHw' = 0
       ELSE UNCHANGED <<drainLo, drainHi, drainHw>>
    /\ UNCHANGED <<planned, wpc, pubEnd, puts, issued, pend, mem, wwait, readerVars>>

(* --------------------------------------------------------- the readers *)
InWindow(h) == pubStart <= h.abs /\ h.abs < pubEnd
\* impl: what the control block says of h's allocation
Ctl(h) == IF InWindow(h) THEN "live"
          ELSE IF drainLo <= h.abs /\ h.abs < drainHi /\ Phys(h.addr) >= drainHw THEN "drain"
          ELSE "stale"
\* what a reader deserializes from the n - 1 payload cells after address a
ReadAt(a, n) ==
    LET tags == {mem[u].obj : u \in {v \in (Phys(a) + 1)..(Phys(a) + n - 1) : v < RingUnits}}
    IN IF Cardinality(tags) = 1 THEN CHOOSE t \in tags : TRUE ELSE Garbage
CanGet(r, h) == pc[r] = "idle" /\ starts[r][h.abs] < (IF ReadOnce THEN 1 ELSE MaxReads)

\* vLLM: a get of handle h starts with the id check against the header
FirstCheck(r, h) ==
    /\ ~Hardened /\ CanGet(r, h)
    /\ starts' = [starts EXCEPT ![r][h.abs] = @ + 1]
    /\ hd' = [hd EXCEPT ![r] = h] /\ floor' = [floor EXCEPT ![r] = clearAt]
    /\ got' = [got EXCEPT ![r] = NoObj]
    /\ hsz' = [hsz EXCEPT ![r] = mem[Phys(h.addr)].size]
    /\ pc' = [pc EXCEPT ![r] = IF mem[Phys(h.addr)].id = h.id THEN "checked" ELSE "idle"]
    /\ UNCHANGED <<writerVars, mem, wwait, pins, verdict, acks>>

\* impl: check the pinned allocation against the control block (live, or an
\* intact drain chunk), then the header's id; a failed check unpins
PinnedCheck(r) ==
    /\ Hardened /\ pc[r] = "pinned"
    /\ LET h == hd[r]
           v == IF Fenced THEN Ctl(h) ELSE verdict[r]
           ok == v # "stale" /\ mem[Phys(h.addr)].id = h.id
       IN /\ pc' = [pc EXCEPT ![r] = IF ok THEN "checked" ELSE "idle"]
          /\ verdict' = [verdict EXCEPT ![r] = IF ok THEN v ELSE "none"]
          /\ pins' = [pins EXCEPT ![r] = IF ok THEN h.abs + 1 ELSE 0]
          /\ wwait' = IF ok THEN wwait ELSE wwait \ {r}
          /\ hsz' = [hsz EXCEPT ![r] = IF ok THEN mem[Phys(h.addr)].size ELSE 0]
    /\ UNCHANGED <<writerVars, mem, hd, got, floor, starts, acks>>

reader_check(r) == (\E h \in issued : FirstCheck(r, h)) \/ PinnedCheck(r)

\* impl: a get of handle h starts: the reader publishes its hazard pin on
\* h's allocation and fences (without the fence, its check's loads of the
\* control block are served now and the pin becomes visible at the check)
PinOf(r, h) ==
    /\ Hardened /\ CanGet(r, h)
    /\ starts' = [starts EXCEPT ![r][h.abs] = @ + 1]
    /\ hd' = [hd EXCEPT ![r] = h] /\ floor' = [floor EXCEPT ![r] = clearAt]
    /\ IF Fenced THEN pins' = [pins EXCEPT ![r] = h.abs + 1] /\ UNCHANGED verdict
       ELSE verdict' = [verdict EXCEPT ![r] = Ctl(h)] /\ UNCHANGED pins
    /\ got' = [got EXCEPT ![r] = NoObj]
    /\ pc' = [pc EXCEPT ![r] = "pinned"]
    /\ UNCHANGED <<writerVars, mem, wwait, hsz, acks>>

pin(r) == \E h \in issued : PinOf(r, h)

\* vLLM: deserialize the payload in place
payload_read(r) ==
    /\ ~Hardened /\ pc[r] = "checked"
    /\ got' = [got EXCEPT ![r] = ReadAt(hd[r].addr, hsz[r])]
    /\ pc' = [pc EXCEPT ![r] = "read"]
    /\ UNCHANGED <<writerVars, mem, wwait, hd, hsz, floor, starts, pins, verdict, acks>>

\* the get ends: the reader's pin is released (the writer's wait for it ends)
Unpin(r) ==
    /\ pc' = [pc EXCEPT ![r] = "idle"] /\ pins' = [pins EXCEPT ![r] = 0]
    /\ verdict' = [verdict EXCEPT ![r] = "none"] /\ wwait' = wwait \ {r} /\ hsz' = [hsz EXCEPT ![r] = 0]

\* impl: deserialize in place, under the pin; a drain read ends here (it is
\* not acknowledged)
deserialize(r) ==
    /\ Hardened /\ pc[r] = "checked"
    /\ got' = [got EXCEPT ![r] = ReadAt(hd[r].addr, hsz[r])]
    /\ IF verdict[r] = "live" THEN pc' = [pc EXCEPT ![r] = "read"] /\ UNCHANGED <<pins, verdict, wwait, hsz>>
       ELSE Unpin(r)
    /\ UNCHANGED <<writerVars, mem, hd, floor, starts, acks>>

\* the chunk that owns ack word k % MaxChunks now: the latest allocation
\* with that word whose base the writer took (after its pin wait)
Based == IF wpc \in {"ready", "header", "payload"} /\ Hardened THEN puts ELSE puts - 1
Owner(k) == k + ((Based - k) \div MaxChunks) * MaxChunks

\* vLLM, under the reader lock: count at the handle's address whatever sits
\* there; impl: the reader's own ack word of the handle's allocation (the
\* pin stays up until unpin)
counter_increment(r) ==
    /\ pc[r] = "read"
    /\ IF Hardened
       THEN /\ acks' = [acks EXCEPT ![r][Owner(hd[r].abs)] = @ + 1] /\ pc' = [pc EXCEPT ![r] = "acked"]
            /\ UNCHANGED mem
       ELSE /\ mem' = [mem EXCEPT ![Phys(hd[r].addr)].cnt = @ + 1]
            /\ pc' = [pc EXCEPT ![r] = "idle"]
            /\ UNCHANGED acks
    /\ UNCHANGED <<writerVars, wwait, hd, hsz, got, floor, starts, pins, verdict>>

\* impl: an acknowledged get ends, its pin released
unpin(r) ==
    /\ Hardened /\ pc[r] = "acked" /\ Unpin(r)
    /\ UNCHANGED <<writerVars, mem, hd, got, floor, starts, acks>>

\* a fault (Mortal): reader r's process dies wherever it is; its pin word
\* stays as it was in shared memory.  impl's writer sees the death (the
\* reader's slot released) and forfeits r's promised reads (Reclaimable)
\* and ends a wait for r's pin (pin_wait); vLLM's count never gets r's reads
die(r) ==
    /\ r \in Mortal /\ pc[r] # "dead"
    /\ pc' = [pc EXCEPT ![r] = "dead"]
    /\ UNCHANGED <<writerVars, mem, wwait, hd, hsz, got, floor, starts, pins, verdict, acks>>

\* the spec's actions are the model's atomic steps (shmspec/model/steps.py),
\* and one fault (model/steps.py FAULT_STEPS)
Next ==
    \/ \E k \in Keys, n \in Sizes : pin_scan(k, n) \/ header_write(k, n)
    \/ pin_wait \/ payload_write \/ publish \/ free_step \/ retire \/ clear
    \/ \E r \in Readers :
         \/ pin(r) \/ reader_check(r) \/ payload_read(r) \/ deserialize(r) \/ counter_increment(r) \/ unpin(r)
         \/ die(r)

Spec == Init /\ [][Next]_vars

(* ------------------------------------------------ progress (PROG, live) *)
\* The client rule PROG relies on: a fair reader makes every read it was
\* promised (it finishes each get it starts and starts a get of every
\* handle it has not read).  A config can take a reader's fairness away
\* (FairReaders <- AllButOneReader): a reference that reader never reads
\* then pins the FIFO head, the client's fault (SEMANTICS.md, PROG).
AllReaders == Readers
AllButOneReader == Readers \ {CHOOSE r \in Readers : TRUE}
FairReaders == AllReaders
ReaderStep(r) == pin(r) \/ reader_check(r) \/ payload_read(r) \/ deserialize(r) \/ counter_increment(r) \/ unpin(r)
\* the writer finishes what it starts and reclaims what it can (weak
\* fairness: a step continuously enabled is eventually taken); it need
\* not put or clear again
Fairness ==
    /\ WF_vars(free_step) /\ WF_vars(retire) /\ WF_vars(pin_wait) /\ WF_vars(payload_write) /\ WF_vars(publish)
    /\ WF_vars(\E k \in Keys, n \in Sizes : header_write(k, n) /\ wpc # "idle")
    /\ \A r \in FairReaders : WF_vars(ReaderStep(r))
FairSpec == Spec /\ Fairness

\* readers are interchangeable, and so are keys: no action, constant or
\* invariant names one
Symmetry == {p @@ q : p \in Permutations(Readers), q \in Permutations(Keys)}

(* --------------------------------------------------------- properties *)
Published(i) == Hardened \/ wpc = "idle" \/ i < Len(chunks)

\* NRR: whatever a reader deserialized is the object put under its handle
NRR == \A r \in Readers : got[r] \in {NoObj, hd[r].obj}

\* the chunks whose bytes are written now: the live ones and, mid-put, the
\* one whose header is written
Written == {chunks[i] : i \in DOMAIN chunks} \cup
           (IF Hardened /\ wpc \in {"header", "payload"} THEN {pend[1]} ELSE {})
\* a chunk allocated after the last clear overlaps the bytes reader r resolves
Reused(r) == \E c \in Written :
               /\ c.abs >= clearAt
               /\ Phys(c.addr) < Phys(hd[r].addr) + Max(hsz[r], 1)
               /\ Phys(hd[r].addr) < Phys(c.addr) + c.size

\* CLR (drain contract): a handle issued before a clear resolves after it
\* only to its own object, and only while no later allocation reused its
\* bytes: a get started after the clear never deserializes another object
\* for it, and no reader is between its check and its deserialization of a
\* pre-clear handle while an allocation since the clear covers its bytes
CLR == \A r \in Readers :
         /\ got[r] \notin {NoObj, hd[r].obj} => hd[r].abs >= floor[r]
         /\ pc[r] = "checked" /\ hd[r].abs < clearAt => ~Reused(r)

\* DISJ: live chunks sit inside the ring and never overlap
DISJ == \A i, j \in DOMAIN chunks :
          /\ Phys(chunks[i].addr) + chunks[i].size <= RingUnits
          /\ i < j => (Phys(chunks[i].addr) + chunks[i].size <= Phys(chunks[j].addr)
                       \/ Phys(chunks[j].addr) + chunks[j].size <= Phys(chunks[i].addr))

\* FIFO: the live chunks are consecutive allocations (frees take the oldest),
\* laid out in allocation order from start within [start, end)
Off(i) == (chunks[i].addr - start) % RingUnits
FIFO == \A i \in DOMAIN chunks :
          /\ chunks[i].abs = chunks[1].abs + i - 1
          /\ Off(i) + chunks[i].size <= end - start
          /\ IF i = 1 THEN Off(i) = 0 ELSE Off(i - 1) < Off(i)

\* WRAP: no two live chunks share an id
WRAP == \A i, j \in DOMAIN chunks : i # j => chunks[i].id # chunks[j].id

\* DUP: no two live chunks share a key
DUP == \A i, j \in DOMAIN chunks : i # j => chunks[i].key # chunks[j].key

\* RC: no read is counted that was not made, so a chunk is never freed before
\* its promised reads: vLLM's in-band reader_count of a published chunk never
\* exceeds the gets started on it; impl's per-reader acks of an allocation
\* never exceed the gets that reader started on it (free_step needs every
\* reader's ack)
RC == /\ \A i \in DOMAIN chunks :
           Published(i) => mem[Phys(chunks[i].addr)].cnt <= SumOver([r \in Readers |-> starts[r][chunks[i].abs]], Readers)
      /\ \A r \in Readers, a \in Abs : acks[r][a] <= starts[r][a]

\* PROM (impl): a reader's promised read of a handle put since the last clear
\* stays possible until that reader has read it, whatever the other readers
\* did: the chunk is live while the reader has not started a get of it
\* (free_step needs the reader's ack, RC that the ack is for a read it made);
\* a dead reader's promise is forfeit
PROM == Hardened => \A r \in Readers, h \in issued :
                      h.abs >= clearAt /\ starts[r][h.abs] = 0 /\ pc[r] # "dead" => InWindow(h)

\* PROG as a liveness property (under FairSpec): every allocation that joins
\* the ring is eventually reclaimed or cleared, so once the writer stops the
\* ring drains and a put of the largest size fits: no chunk stays pinned by
\* a count or an ack that never reaches its threshold
InRing(a) == \E i \in DOMAIN chunks : chunks[i].abs = a
PROGLive == \A a \in Abs : InRing(a) ~> ~InRing(a)
=============================================================================
