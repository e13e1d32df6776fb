//! UDP, SCTP and every protocol without its own tracker: OVS
//! lib/conntrack-other.c. Only "seen one way / several packets / both
//! ways" is tracked.

use crate::conn::Update;
use crate::timeouts::Tm;

/// `enum other_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OtherState {
    First,
    Multiple,
    Bidir,
}

impl OtherState {
    fn timer(self) -> Tm {
        match self {
            OtherState::First => Tm::OtherFirst,
            OtherState::Multiple => Tm::OtherMultiple,
            OtherState::Bidir => Tm::OtherBidir,
        }
    }

    /// `other_new_conn`: the expiration to start with.
    pub(crate) fn initial_timer() -> Tm {
        OtherState::First.timer()
    }

    /// `other_conn_update`: a reply makes the connection bidirectional
    /// (+est from then on); further original-direction packets before any
    /// reply stay +new.
    pub(crate) fn update(&mut self, reply: bool) -> Update {
        if reply && *self != OtherState::Bidir {
            *self = OtherState::Bidir;
        } else if *self == OtherState::First {
            *self = OtherState::Multiple;
        }
        let tm = Some(self.timer());
        if *self == OtherState::Bidir {
            Update::Valid(tm)
        } else {
            Update::ValidNew(tm)
        }
    }
}
