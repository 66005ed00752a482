---------------------------- MODULE ShmStore ----------------------------
(***************************************************************************)
(* One writer and N readers of the single-writer / multi-reader           *)
(* shared-memory object store (SEMANTICS.md), one action per atomic step. *)
(* Action names are the model's atomic steps (shmspec/model/steps.py), and *)
(* shmspec/model/atomic.py is the same transition system in Python: `shmspec *)
(* model` enumerates both and compares their state sets.                    *)
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
(*     whatever reader_count now sits at the handle's address.             *)
(*   Hardened = TRUE   impl/: reader_check against the published window    *)
(*     [pubStart, pubEnd) of absolute allocation counters; payload_read    *)
(*     copies the bytes out; reader_check again; counter_increment checks  *)
(*     the window again under the lock (which the writer holds while it    *)
(*     frees or clears: the reclaim fence); deserialize the private copy.  *)
(* ReadOnce:    clients keep the read-once protocol (each reader reads a   *)
(*              handle at most once).                                      *)
(* ClearResets: clear() resets ids to 0 (vLLM < 0.32).                     *)
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
    Hardened, ReadOnce, ClearResets

NoObj   == 0      \* nothing deserialized (yet)
Garbage == -1     \* bytes of more than one object

VARIABLES
    start, end,   \* the writer's ring pointers (virtual units)
    idStart,      \* id of the oldest live chunk
    idEnd,        \* id the next chunk gets
    chunks,       \* live chunks, oldest first: [abs, addr, size, id, key]
    mem,          \* physical unit -> [id, size, cnt, obj]
    wpc,          \* the writer inside put: "idle" | "header" | "payload"
    pubStart,     \* published window of absolute allocation counters
    pubEnd,       \*   (impl's control block; readers of vLLM ignore it)
    puts,         \* allocations so far (absolute counter)
    issued,       \* handles handed to clients: [abs, addr, id, obj]
    clearAt,      \* history: allocations before the last clear (CLR)
    pc,           \* reader -> "idle" | "checked" | "read" | "copied" | "rechecked" | "counted"
    hd,           \* reader -> the handle of its current get
    hsz,          \* reader -> the chunk size it read from the header
    copy,         \* reader -> what its payload_read copied (Hardened)
    got,          \* reader -> what its current get deserialized
    floor,        \* reader -> clearAt when its current get started (CLR)
    starts        \* reader -> abs -> gets started (history, for RC)

writerVars == <<start, end, idStart, idEnd, chunks, wpc, pubStart, pubEnd, puts, issued, clearAt>>
readerVars == <<pc, hd, hsz, copy, got, floor, starts>>
vars == <<writerVars, mem, readerVars>>

NReaders == Cardinality(Readers)
Abs == 0..(MaxPuts - 1)
Ids == 0..(IdMod - 1)
Units == 0..(RingUnits - 1)
Objs == {Garbage, NoObj} \cup 1..MaxPuts
NoHandle == [abs |-> 0, addr |-> 0, id |-> 0, obj |-> NoObj]
Handle == [abs : Abs, addr : 0..(2 * RingUnits), id : Ids, obj : 1..MaxPuts]
Cell == [id : Ids, size : 0..RingUnits, cnt : 0..(NReaders * MaxReads * MaxPuts), obj : {NoObj} \cup 1..MaxPuts]

RECURSIVE SumOver(_, _)
SumOver(f, S) == IF S = {} THEN 0 ELSE LET x == CHOOSE y \in S : TRUE IN f[x] + SumOver(f, S \ {x})

TypeOK ==
    /\ start \in 0..RingUnits /\ end \in 0..(2 * RingUnits) /\ start <= end
    /\ idStart \in Ids /\ idEnd \in Ids /\ puts \in 0..MaxPuts /\ clearAt \in 0..MaxPuts
    /\ \A i \in DOMAIN chunks : chunks[i] \in [abs : Abs, addr : 0..(2 * RingUnits), size : Sizes, id : Ids, key : Keys]
    /\ mem \in [Units -> Cell]
    /\ wpc \in {"idle", "header", "payload"}
    /\ pubStart \in 0..MaxPuts /\ pubEnd \in 0..MaxPuts /\ issued \subseteq Handle
    /\ pc \in [Readers -> {"idle", "checked", "read", "copied", "rechecked", "counted"}]
    /\ hd \in [Readers -> Handle \cup {NoHandle}] /\ hsz \in [Readers -> 0..RingUnits]
    /\ copy \in [Readers -> Objs] /\ got \in [Readers -> Objs] /\ floor \in [Readers -> 0..MaxPuts]
    /\ starts \in [Readers -> [Abs -> 0..MaxReads]]

Init ==
    /\ start = 0 /\ end = 0 /\ idStart = 0 /\ idEnd = 0 /\ chunks = <<>>
    /\ mem = [u \in Units |-> [id |-> 0, size |-> 0, cnt |-> 0, obj |-> NoObj]]
    /\ wpc = "idle" /\ pubStart = 0 /\ pubEnd = 0 /\ puts = 0 /\ issued = {} /\ clearAt = 0
    /\ pc = [r \in Readers |-> "idle"] /\ hd = [r \in Readers |-> NoHandle]
    /\ hsz = [r \in Readers |-> 0] /\ copy = [r \in Readers |-> NoObj]
    /\ got = [r \in Readers |-> NoObj] /\ floor = [r \in Readers |-> 0]
    /\ starts = [r \in Readers |-> [a \in Abs |-> 0]]

Phys(a) == a % RingUnits
LiveKeys == {chunks[i].key : i \in DOMAIN chunks}
Last == chunks[Len(chunks)]

(* ---------------------------------------------------------- the writer *)
\* where n units go (model/ring.py plan_allocation): jump to the next
\* multiple of RingUnits when the chunk would not sit contiguously at the tail
Place(n) == IF (end % RingUnits) + n > RingUnits THEN (end \div RingUnits + 1) * RingUnits ELSE end

\* put, step 1: allocate n units for key k (DUP: not a live key; OOM: room
\* after the jump) and write the chunk's [id][chunk_size] header
header_write(k, n) ==
    /\ wpc = "idle" /\ puts < MaxPuts
    /\ k \notin LiveKeys
    /\ Place(n) + n - start <= RingUnits
    /\ LET a == Place(n) IN
       /\ chunks' = Append(chunks, [abs |-> puts, addr |-> a, size |-> n, id |-> idEnd, key |-> k])
       /\ mem' = [mem EXCEPT ![Phys(a)].id = idEnd, ![Phys(a)].size = n]
       /\ end' = a + n
    /\ idEnd' = (idEnd + 1) % IdMod
    /\ puts' = puts + 1 /\ wpc' = "header"
    /\ UNCHANGED <<start, idStart, pubStart, pubEnd, issued, clearAt, readerVars>>

\* put, step 2: [reader_count = 0][metadata][data]
payload_write ==
    /\ wpc = "header"
    /\ LET p == Phys(Last.addr) IN
       mem' = [u \in Units |->
                 IF u = p THEN [mem[u] EXCEPT !.cnt = 0]
                 ELSE IF p < u /\ u < p + Last.size THEN [mem[u] EXCEPT !.obj = Last.abs + 1]
                 ELSE mem[u]]
    /\ wpc' = "payload"
    /\ UNCHANGED <<start, end, idStart, idEnd, chunks, pubStart, pubEnd, puts, issued, clearAt, readerVars>>

\* put, step 3: the handle is returned (and, in impl, the window published)
publish ==
    /\ wpc = "payload"
    /\ issued' = issued \cup {[abs |-> Last.abs, addr |-> Last.addr, id |-> Last.id, obj |-> Last.abs + 1]}
    /\ pubEnd' = Last.abs + 1
    /\ wpc' = "idle"
    /\ UNCHANGED <<start, end, idStart, idEnd, chunks, pubStart, puts, clearAt, mem, readerVars>>

\* one iteration of the FIFO free loop (model/ring.py free): the oldest chunk
\* goes once every reader counted it (RC: reader_count >= writer_count * n_readers)
free_step ==
    /\ wpc = "idle" /\ chunks # <<>>
    /\ Head(chunks).id = idStart
    /\ mem[Phys(Head(chunks).addr)].cnt >= NReaders
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
    /\ UNCHANGED <<idEnd, wpc, pubEnd, puts, issued, clearAt, mem, readerVars>>

\* drop every chunk; ids reset to 0 before vLLM 0.32, kept after
clear ==
    /\ wpc = "idle"
    /\ chunks' = <<>> /\ start' = 0 /\ end' = 0
    /\ IF ClearResets THEN idStart' = 0 /\ idEnd' = 0 ELSE idStart' = idEnd /\ UNCHANGED idEnd
    /\ pubStart' = puts /\ clearAt' = puts
    /\ UNCHANGED <<wpc, pubEnd, puts, issued, mem, readerVars>>

(* --------------------------------------------------------- the readers *)
InWindow(h) == pubStart <= h.abs /\ h.abs < pubEnd
\* what a reader deserializes from the n - 1 payload cells after address a
ReadAt(a, n) ==
    LET tags == {mem[u].obj : u \in {v \in (Phys(a) + 1)..(Phys(a) + n - 1) : v < RingUnits}}
    IN IF Cardinality(tags) = 1 THEN CHOOSE t \in tags : TRUE ELSE Garbage

\* the first reader_check, of handle h: a get starts
FirstCheck(r, h) ==
    /\ pc[r] = "idle"
    /\ starts[r][h.abs] < (IF ReadOnce THEN 1 ELSE MaxReads)
    /\ starts' = [starts EXCEPT ![r][h.abs] = @ + 1]
    /\ hd' = [hd EXCEPT ![r] = h] /\ floor' = [floor EXCEPT ![r] = clearAt]
    /\ got' = [got EXCEPT ![r] = NoObj] /\ copy' = [copy EXCEPT ![r] = NoObj]
    /\ hsz' = [hsz EXCEPT ![r] = mem[Phys(h.addr)].size]
    /\ pc' = [pc EXCEPT ![r] = IF (IF Hardened THEN InWindow(h) ELSE mem[Phys(h.addr)].id = h.id)
                                THEN "checked" ELSE "idle"]
    /\ UNCHANGED <<writerVars, mem>>

\* the second reader_check, after the copy (Hardened)
Recheck(r) ==
    /\ pc[r] = "copied"
    /\ pc' = [pc EXCEPT ![r] = IF InWindow(hd[r]) THEN "rechecked" ELSE "idle"]
    /\ UNCHANGED <<writerVars, mem, hd, hsz, copy, got, floor, starts>>

reader_check(r) == (\E h \in issued : FirstCheck(r, h)) \/ Recheck(r)

\* Hardened: copy the payload out; vLLM: deserialize it in place
payload_read(r) ==
    /\ pc[r] = "checked"
    /\ IF Hardened
       THEN /\ copy' = [copy EXCEPT ![r] = ReadAt(hd[r].addr, hsz[r])] /\ UNCHANGED got
            /\ pc' = [pc EXCEPT ![r] = "copied"]
       ELSE /\ got' = [got EXCEPT ![r] = ReadAt(hd[r].addr, hsz[r])] /\ UNCHANGED copy
            /\ pc' = [pc EXCEPT ![r] = "read"]
    /\ UNCHANGED <<writerVars, mem, hd, hsz, floor, starts>>

\* under the reader lock: vLLM counts at the handle's address whatever sits
\* there; Hardened counts only a chunk still in the window
counter_increment(r) ==
    /\ pc[r] \in {"read", "rechecked"}
    /\ IF Hardened /\ ~InWindow(hd[r])
       THEN pc' = [pc EXCEPT ![r] = "idle"] /\ UNCHANGED mem
       ELSE /\ mem' = [mem EXCEPT ![Phys(hd[r].addr)].cnt = @ + 1]
            /\ pc' = [pc EXCEPT ![r] = IF Hardened THEN "counted" ELSE "idle"]
    /\ UNCHANGED <<writerVars, hd, hsz, copy, got, floor, starts>>

\* deserialize the private copy (Hardened)
deserialize(r) ==
    /\ pc[r] = "counted"
    /\ got' = [got EXCEPT ![r] = copy[r]]
    /\ pc' = [pc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<writerVars, mem, hd, hsz, copy, floor, starts>>

\* the spec's actions are the model's atomic steps (shmspec/model/steps.py)
Next ==
    \/ \E k \in Keys, n \in Sizes : header_write(k, n)
    \/ payload_write \/ publish \/ free_step \/ clear
    \/ \E r \in Readers :
         \/ reader_check(r) \/ payload_read(r) \/ counter_increment(r) \/ deserialize(r)

Spec == Init /\ [][Next]_vars

\* readers are interchangeable, and so are keys: no action, constant or
\* invariant names one
Symmetry == {p @@ q : p \in Permutations(Readers), q \in Permutations(Keys)}

(* --------------------------------------------------------- properties *)
Live(a) == \E i \in DOMAIN chunks : chunks[i].abs = a
Published(i) == wpc = "idle" \/ i < Len(chunks)

\* NRR: whatever a reader deserialized is the object put under its handle
NRR == \A r \in Readers : got[r] \in {NoObj, hd[r].obj}

\* CLR: a get that started after a clear never returns a pre-clear object
CLR == \A r \in Readers : got[r] # NoObj => hd[r].abs >= floor[r]

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

\* RC: a published chunk's reader_count never exceeds the gets started on it
RC == \A i \in DOMAIN chunks :
        Published(i) => mem[Phys(chunks[i].addr)].cnt <= SumOver([r \in Readers |-> starts[r][chunks[i].abs]], Readers)
=============================================================================
