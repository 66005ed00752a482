------------------------------ MODULE TraceData ------------------------------
(***************************************************************************)
(* The recorded runs ShmStoreTrace.tla checks.  shmspec validate writes    *)
(* its own TraceData module beside a copy of the spec for every check; a   *)
(* definition, not a CONSTANT, because TLC evaluates a constant's          *)
(* overriding definition at every use (a 5,000-step trace made a 500-step  *)
(* check 26x slower) and a module's definition once.  This one is a single *)
(* empty run, so that the spec parses and checks as it is.  Firsts[t][p]: *)
(* the index of process p's first step in run t (Len + 1: none).          *)
(***************************************************************************)
Traces == << <<>> >>
Firsts == << [writer |-> 1] >>
=============================================================================
