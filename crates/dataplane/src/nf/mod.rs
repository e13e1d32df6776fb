//! Network functions beside the switch's tables. Packets reach them through
//! datapath actions (`ct`) that the slow path emits for rules that ask for
//! them; the functions' state lives here or in their own crates, and the
//! control plane reads and changes it through these modules.

pub mod conntrack;
