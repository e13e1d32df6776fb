//! The control protocol: one JSON request per line on the unix socket, one
//! JSON response per line back.
//!
//! Every CLI verb is one [`Request`]. Responses carry both a human text
//! rendering (what the CLI prints) and structured data (what `--json`
//! prints), so scripts never have to parse text.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    AddBr {
        bridge: String,
    },
    DelBr {
        bridge: String,
    },
    AddPort {
        bridge: String,
        iface: String,
        #[serde(rename = "type")]
        kind: String,
        name: Option<String>,
        #[serde(default)]
        options: PortOptions,
    },
    DelPort {
        bridge: String,
        name: String,
    },
    Show,
    AddFlow {
        bridge: String,
        flow: String,
    },
    /// The text of a flows file (read by the CLI), applied all or nothing.
    AddFlows {
        bridge: String,
        text: String,
    },
    DelFlows {
        bridge: String,
        filter: Option<String>,
    },
    DumpFlows {
        bridge: String,
    },
    DumpDpFlows {
        bridge: String,
    },
    /// `nicflow p4 ...`: a P4 program as the bridge's slow path.
    P4 {
        bridge: String,
        op: P4Op,
    },
    /// `offload-plan BR --profile NAME`: which datapath flows the NIC
    /// would hold (changes nothing).
    OffloadPlan {
        bridge: String,
        profile: String,
    },
    /// `add-group BR GROUP` (`ovs-ofctl add-group` syntax).
    AddGroup {
        bridge: String,
        group: String,
    },
    /// The text of a groups file, one group a line, all or nothing.
    AddGroups {
        bridge: String,
        text: String,
    },
    /// `mod-group BR GROUP`: replace an existing group's type and buckets.
    ModGroup {
        bridge: String,
        group: String,
    },
    /// `del-groups BR [group_id=N]`: the group(s) and the rules using them.
    DelGroups {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    DumpGroups {
        bridge: String,
    },
    DumpGroupStats {
        bridge: String,
    },
    /// `add-meter BR METER` (`ovs-ofctl add-meter` syntax).
    AddMeter {
        bridge: String,
        meter: String,
    },
    /// `mod-meter BR METER`: new flags and bands for an existing meter.
    ModMeter {
        bridge: String,
        meter: String,
    },
    /// `del-meters BR [meter=N]`: the meter(s) and the rules using them.
    DelMeters {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    DumpMeters {
        bridge: String,
    },
    /// `meter-stats BR [meter=N]`.
    MeterStats {
        bridge: String,
        #[serde(default)]
        filter: Option<String>,
    },
    /// Tracked connections, as `ovs-appctl dpctl/dump-conntrack` prints
    /// them; `verbose` is `-m`, `stats` is `-s`.
    DumpConntrack {
        bridge: String,
        #[serde(default)]
        zone: Option<u16>,
        #[serde(default)]
        verbose: bool,
        #[serde(default)]
        stats: bool,
    },
    /// Remove tracked connections: all, a zone's, or those whose original
    /// tuple matches `filter` (OVS's `ct_nw_src=..,ct_tp_dst=..` syntax).
    FlushConntrack {
        bridge: String,
        #[serde(default)]
        zone: Option<u16>,
        #[serde(default)]
        filter: Option<String>,
    },
    ConntrackStats {
        bridge: String,
    },
    Stats,
    /// A VF in `namespace` with its representor on `bridge` (see
    /// `control::vf`).
    AddVf {
        bridge: String,
        namespace: String,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        mac: Option<String>,
        #[serde(default)]
        ips: Vec<String>,
        #[serde(default)]
        rep_type: Option<String>,
    },
    /// Remove a VF (by VF name or representor name) and its veth pair.
    DelVf {
        bridge: String,
        name: String,
    },
    /// `nicflow set BR KEY=VALUE`: bridge settings (`offload=xdp|none`).
    Set {
        bridge: String,
        key: String,
        value: String,
    },
    /// `set-controller BR TARGET...`: replaces the bridge's controllers
    /// (OVS target syntax: tcp:, ptcp:, ssl:, pssl:, unix:, punix:).
    SetController {
        bridge: String,
        targets: Vec<String>,
    },
    DelController {
        bridge: String,
    },
    GetController {
        bridge: String,
    },
    /// `set-fail-mode BR standalone|secure`.
    SetFailMode {
        bridge: String,
        mode: String,
    },
    GetFailMode {
        bridge: String,
    },
    /// `set-ssl KEY CERT CACERT`: the TLS files of `ssl:`/`pssl:` targets
    /// (paths only: the key's content never travels or is logged).
    SetSsl {
        private_key: std::path::PathBuf,
        certificate: std::path::PathBuf,
        ca_cert: std::path::PathBuf,
    },
    GetSsl,
    DelSsl,
}

/// A secret option value (an ESP key, a pre-shared key): it prints as
/// `<redacted>` with `{:?}` and `{}`, so a request, a port's configuration
/// or an error that formats it cannot leak it by accident. The value
/// itself is only reachable through [`Secret::expose`], which the code
/// that needs the key (`port::ipsec`) calls, and through serialization,
/// which only the control socket (owner-only) and the configuration file
/// (mode 0600) see.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself: for the code that uses the key, never for output.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The options `nicflow-port`'s IPsec reads as key material: held as
/// [`Secret`]s by [`PortOptions`], printed `(secret)` by `show` and
/// `<redacted>` in logs.
pub const SECRET_OPTIONS: &[&str] = &["esp_key_out", "esp_key_in", "psk"];

/// Is option `key`'s value a secret? The keys IPsec reads as keys
/// ([`SECRET_OPTIONS`]), and, so that a misspelt one
/// (refused as unknown, but logged with the request first) is not printed
/// either, every key that names a key, a PSK, a secret or a password.
pub fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_OPTIONS.contains(&k.as_str())
        || ["esp_key", "psk", "secret", "passw", "private", "_key_"]
            .iter()
            .any(|p| k.contains(p))
}

/// One option value: plain text, or a [`Secret`] when its key says so
/// ([`is_secret_option`]).
#[derive(Clone, PartialEq, Eq)]
enum OptionValue {
    Plain(String),
    Secret(Secret),
}

/// What `show` and every iteration print for a secret value.
pub const SHOWN_SECRET: &str = "(secret)";

/// A port's `KEY=VALUE` options, as `add-port` sends them and the
/// configuration file keeps them. Values of secret keys are held as
/// [`Secret`]s from the moment they are parsed (CLI arguments, the JSON
/// request, the TOML file), so the request and configuration types that
/// carry them print `<redacted>` in logs, and [`PortOptions::get`] and
/// [`PortOptions::iter`] never hand them out: only
/// [`PortOptions::secret`] does. Parse errors of a secret value do not
/// quote it. Serialized (control socket, configuration file) as a plain
/// map of strings.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PortOptions(BTreeMap<String, OptionValue>);

impl PortOptions {
    pub fn new() -> PortOptions {
        PortOptions::default()
    }

    /// Set `key`; its value becomes a [`Secret`] if the key is secret.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        let v = if is_secret_option(&key) {
            OptionValue::Secret(Secret(value))
        } else {
            OptionValue::Plain(value)
        };
        self.0.insert(key, v);
    }

    /// The value of a non-secret option (`None` for a secret one: see
    /// [`PortOptions::secret`]).
    pub fn get(&self, key: &str) -> Option<&String> {
        match self.0.get(key)? {
            OptionValue::Plain(v) => Some(v),
            OptionValue::Secret(_) => None,
        }
    }

    /// The value of a secret option.
    pub fn secret(&self, key: &str) -> Option<&Secret> {
        match self.0.get(key)? {
            OptionValue::Secret(s) => Some(s),
            OptionValue::Plain(_) => None,
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Every key, secret or not, in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    /// Every option in key order, a secret one's value shown as
    /// [`SHOWN_SECRET`] (what `show` prints).
    pub fn iter(&self) -> impl Iterator<Item = (&String, &str)> {
        self.0.iter().map(|(k, v)| {
            (
                k,
                match v {
                    OptionValue::Plain(v) => v.as_str(),
                    OptionValue::Secret(_) => SHOWN_SECRET,
                },
            )
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn remove(&mut self, key: &str) {
        self.0.remove(key);
    }
}

impl<'a> IntoIterator for &'a PortOptions {
    type Item = (&'a String, &'a str);
    type IntoIter = Box<dyn Iterator<Item = (&'a String, &'a str)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for PortOptions {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut o = PortOptions::new();
        for (k, v) in iter {
            o.insert(k, v);
        }
        o
    }
}

impl From<BTreeMap<String, String>> for PortOptions {
    fn from(m: BTreeMap<String, String>) -> Self {
        m.into_iter().collect()
    }
}

impl fmt::Debug for PortOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| {
                (
                    k,
                    match v {
                        OptionValue::Plain(v) => v.as_str(),
                        OptionValue::Secret(_) => "<redacted>",
                    },
                )
            }))
            .finish()
    }
}

impl Serialize for PortOptions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            match v {
                OptionValue::Plain(v) => m.serialize_entry(k, v)?,
                OptionValue::Secret(v) => m.serialize_entry(k, v.expose())?,
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for PortOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Map;
        impl<'de> serde::de::Visitor<'de> for Map {
            type Value = PortOptions;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of option names to string values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<PortOptions, A::Error> {
                let mut o = PortOptions::new();
                while let Some(k) = a.next_key::<String>()? {
                    let v = if is_secret_option(&k) {
                        a.next_value_seed(SecretText(&k))?
                    } else {
                        a.next_value::<String>()?
                    };
                    o.insert(k, v);
                }
                Ok(o)
            }
        }
        d.deserialize_map(Map)
    }
}

/// Deserializes a secret option's value: a string, and an error that
/// names the option, never the value, for anything else (serde's own
/// "invalid type: integer `1234`" would quote it).
struct SecretText<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for SecretText<'_> {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        // `deserialize_any`: `deserialize_string` lets serde_json build
        // its own type error, which quotes the value.
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for SecretText<'_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string for option `{}`", self.0)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<String, E> {
        Err(self.not_a_string())
    }
    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<String, E> {
        Err(self.not_a_string())
    }
}

impl SecretText<'_> {
    fn not_a_string<E: serde::de::Error>(&self) -> E {
        E::custom(format_args!(
            "option `{}`: expected a string (value not shown: it is secret)",
            self.0
        ))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    pub fn ok(text: impl Into<String>, data: serde_json::Value) -> Self {
        Response {
            ok: true,
            text: text.into(),
            data,
            error: None,
        }
    }

    pub fn err(e: impl std::fmt::Display) -> Self {
        Response {
            ok: false,
            error: Some(e.to_string()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format() {
        let r = Request::AddFlow {
            bridge: "br0".into(),
            flow: "actions=drop".into(),
        };
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"cmd":"add-flow","bridge":"br0","flow":"actions=drop"}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&s).unwrap(), r);
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"nope"}"#).is_err());
        let v: Request =
            serde_json::from_str(r#"{"cmd":"add-vf","bridge":"br0","namespace":"c1"}"#).unwrap();
        assert_eq!(
            v,
            Request::AddVf {
                bridge: "br0".into(),
                namespace: "c1".into(),
                name: None,
                mac: None,
                ips: vec![],
                rep_type: None,
            }
        );
    }

    const KEY: &str = "0x00112233445566778899aabbccddeeff01020304";

    #[test]
    fn secret_options_never_print() {
        let opts: PortOptions = [
            ("underlay", "u0"),
            ("esp_key_out", KEY),
            ("psk", "hunter22hunter22"),
            ("esp_keyout", "typo-secret-value"),
        ]
        .into_iter()
        .collect();
        let r = Request::AddPort {
            bridge: "br0".into(),
            iface: "vx1".into(),
            kind: "vxlan".into(),
            name: None,
            options: opts.clone(),
        };
        for text in [format!("{r:?}"), format!("{r:#?}"), format!("{opts:?}")] {
            assert!(
                !text.contains("00112233") && !text.contains("hunter22"),
                "{text}"
            );
            assert!(!text.contains("typo-secret"), "{text}");
            assert!(text.contains("<redacted>") && text.contains("u0"), "{text}");
        }
        assert_eq!(opts.get("underlay").map(String::as_str), Some("u0"));
        assert_eq!(opts.get("esp_key_out"), None);
        assert_eq!(opts.secret("esp_key_out").unwrap().expose(), KEY);
        assert_eq!(format!("{}", opts.secret("psk").unwrap()), "<redacted>");
        let shown: Vec<_> = opts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert!(shown.contains(&"psk=(secret)".to_string()), "{shown:?}");
        // The wire and the configuration file carry the value itself, and
        // read it back as a secret.
        let wire = serde_json::to_string(&r).unwrap();
        assert!(wire.contains(KEY), "{wire}");
        assert_eq!(serde_json::from_str::<Request>(&wire).unwrap(), r);
        assert!(!is_secret_option("key") && !is_secret_option("promisc"));
        assert!(is_secret_option("esp_key_in") && is_secret_option("PSK"));
    }

    #[test]
    fn a_secret_of_the_wrong_type_is_not_quoted() {
        for bad in [
            r#"{"cmd":"add-port","bridge":"b","iface":"v","type":"vxlan","name":null,"options":{"psk":1234567890123}}"#,
            r#"{"cmd":"add-port","bridge":"b","iface":"v","type":"vxlan","name":null,"options":{"psk":[1234567890123]}}"#,
            r#"{"cmd":"add-port","bridge":"b","iface":"v","type":"vxlan","name":null,"options":{"esp_key_in":true}}"#,
        ] {
            let e = serde_json::from_str::<Request>(bad)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("1234567890123") && !e.contains("true"), "{e}");
        }
        let e = serde_json::from_str::<Request>(
            r#"{"cmd":"add-port","bridge":"b","iface":"v","type":"vxlan","name":null,"options":{"psk":1234567890123}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("psk") && e.contains("not shown"), "{e}");
    }
}

/// A frame as it crosses the control socket in [`P4Op`]s (`PacketOut`,
/// `Inject`, `TakePacketIns`' answer): lowercase hex.
pub fn frame_to_hex(frame: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(frame.len() * 2);
    for b in frame {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// The frame a [`frame_to_hex`] string holds; `None` when it is not hex
/// (odd length, other characters).
pub fn frame_from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// What a [`Request::P4`] does to a bridge's P4 program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum P4Op {
    /// Load a program (from `path` on the daemon's host, or its `source`
    /// text) as the bridge's slow path; `include` are `-I` directories.
    Load {
        path: Option<String>,
        source: Option<String>,
        /// `pna`, `v1model` or `psa` (default: from the program's `main`).
        arch: Option<String>,
        #[serde(default)]
        include: Vec<String>,
        /// The program's CPU port number (P4Runtime PacketIn/PacketOut):
        /// copies sent to it are queued for the controller.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_port: Option<u32>,
    },
    /// Back to the OpenFlow tables.
    Unload,
    /// Tables, actions and externs of the loaded program.
    Info,
    /// `ACTION KEY... [=> PARAM...] [priority N]`.
    TableAdd {
        table: String,
        words: Vec<String>,
        /// The entry's own idle timeout (P4Runtime `idle_timeout_ns`; 0:
        /// never), instead of the table's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_timeout_ns: Option<u64>,
    },
    /// Replace an entry's action: `ENTRY-ID ACTION [PARAM...]`.
    TableModify {
        table: String,
        words: Vec<String>,
    },
    TableDel {
        table: String,
        id: u64,
    },
    /// Delete the entry with this match: `KEY... [priority N]` (P4Runtime
    /// deletes by match).
    TableDelMatch {
        table: String,
        words: Vec<String>,
    },
    /// Replace the action of the entry with this match (table-add syntax).
    TableModifyMatch {
        table: String,
        words: Vec<String>,
        /// As for `TableAdd`; absent: the entry keeps its timeout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_timeout_ns: Option<u64>,
    },
    /// Entries of one table, or of all.
    TableDump {
        table: Option<String>,
    },
    /// `ACTION [PARAM...]`.
    SetDefault {
        table: String,
        words: Vec<String>,
    },
    CounterRead {
        name: String,
        index: Option<u64>,
    },
    RegisterRead {
        name: String,
        index: Option<u64>,
    },
    RegisterWrite {
        name: String,
        index: u64,
        value: String,
    },
    /// A Netronome RTE `user_config.json` (its text).
    LoadConfig {
        json: String,
    },
    /// Idle-timeout notifications not yet taken (P4Runtime).
    TakeIdle,
    /// Send a frame out of a port as the program's controller would
    /// (P4Runtime `PacketOut`): `data` in hex.
    PacketOut {
        port: u32,
        data: String,
    },
    /// Frames the program sent to the CPU port, not yet taken (at most
    /// `max`, oldest first; `data` in hex).
    TakePacketIns {
        max: usize,
    },
    /// Run a controller's frame (`data` in hex, its `packet_out` header in
    /// front) through the program as arriving on the CPU port (P4Runtime
    /// `PacketOut`, BMv2's `--cpu-port` semantics).
    Inject {
        data: String,
    },
}
