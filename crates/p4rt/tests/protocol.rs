//! P4Runtime protocol behaviour of the server, driven with the generated Rust
//! client over loopback against the `TableStore` test double: arbitration
//! corner cases, pipeline actions, status codes, LPM checks, direct counters,
//! idle-timeout and packet-in delivery. (tests/shell.rs covers interop with
//! p4runtime-shell.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nicflow_p4rt::proto::p4::config::v1 as cfg;
use nicflow_p4rt::proto::p4::v1 as p4;
use nicflow_p4rt::proto::p4::v1::p4_runtime_client::P4RuntimeClient;
use nicflow_p4rt::testing::TableStore;
use nicflow_p4rt::{ServerHandle, TargetEvent};
use p4::stream_message_request::Update as Req;
use p4::stream_message_response::Update as Resp;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

const DEV: u64 = 7;

fn preamble(id: u32, name: &str) -> Option<cfg::Preamble> {
    Some(cfg::Preamble {
        id,
        name: name.into(),
        alias: name.into(),
        ..Default::default()
    })
}

/// An IPv6 LPM table with a direct counter and idle timeouts (the shape of
/// the brief's `MyIngress.ipv6_lpm`), built here since no corpus P4Info has one.
fn p4info() -> cfg::P4Info {
    use cfg::match_field::{Match, MatchType};
    cfg::P4Info {
        tables: vec![cfg::Table {
            preamble: preamble(1, "MyIngress.ipv6_lpm"),
            match_fields: vec![cfg::MatchField {
                id: 1,
                name: "hdr.ipv6.dst_addr".into(),
                bitwidth: 128,
                r#match: Some(Match::MatchType(MatchType::Lpm as i32)),
                ..Default::default()
            }],
            action_refs: vec![
                cfg::ActionRef {
                    id: 10,
                    ..Default::default()
                },
                cfg::ActionRef {
                    id: 11,
                    scope: cfg::action_ref::Scope::DefaultOnly as i32,
                    ..Default::default()
                },
            ],
            initial_default_action: Some(cfg::TableActionCall {
                action_id: 11,
                arguments: vec![],
            }),
            direct_resource_ids: vec![100],
            size: 2,
            idle_timeout_behavior: cfg::table::IdleTimeoutBehavior::NotifyControl as i32,
            ..Default::default()
        }],
        actions: vec![
            cfg::Action {
                preamble: preamble(10, "MyIngress.ipv6_forward"),
                params: vec![
                    cfg::action::Param {
                        id: 1,
                        name: "dstAddr".into(),
                        bitwidth: 48,
                        ..Default::default()
                    },
                    cfg::action::Param {
                        id: 2,
                        name: "port".into(),
                        bitwidth: 9,
                        ..Default::default()
                    },
                ],
            },
            cfg::Action {
                preamble: preamble(11, "MyIngress.drop"),
                params: vec![],
            },
        ],
        meters: vec![cfg::Meter {
            preamble: preamble(200, "MyIngress.m"),
            size: 4,
            ..Default::default()
        }],
        direct_counters: vec![cfg::DirectCounter {
            preamble: preamble(100, "MyIngress.lpm_hits"),
            spec: Some(cfg::CounterSpec {
                unit: cfg::counter_spec::Unit::Both as i32,
            }),
            direct_table_id: 1,
        }],
        ..Default::default()
    }
}

/// A 128-bit address whose first bytes are `top` (P4Runtime byte strings are
/// big-endian integers, so a prefix sits in the high bytes).
fn v6(top: &[u8]) -> Vec<u8> {
    let mut v = top.to_vec();
    v.resize(16, 0);
    v
}

fn eid(low: u64) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: 0, low })
}

struct Fixture {
    server: ServerHandle,
    store: Arc<TableStore>,
    client: P4RuntimeClient<Channel>,
}

async fn start() -> Fixture {
    let store = Arc::new(TableStore::new());
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    let server = nicflow_p4rt::spawn(addr, DEV, store.clone())
        .await
        .expect("server starts");
    let client = P4RuntimeClient::connect(format!("http://{}", server.local_addr))
        .await
        .expect("connects");
    Fixture {
        server,
        store,
        client,
    }
}

/// One StreamChannel: its sender and its incoming messages.
struct Stream {
    tx: mpsc::Sender<p4::StreamMessageRequest>,
    rx: tonic::Streaming<p4::StreamMessageResponse>,
}

impl Stream {
    async fn open(client: &mut P4RuntimeClient<Channel>) -> Stream {
        let (tx, rx) = mpsc::channel(16);
        let rx = client
            .stream_channel(ReceiverStream::new(rx))
            .await
            .expect("stream opens")
            .into_inner();
        Stream { tx, rx }
    }
    async fn send(&self, u: Req) {
        self.tx
            .send(p4::StreamMessageRequest { update: Some(u) })
            .await
            .expect("stream open");
    }
    async fn arbitrate(&self, device_id: u64, election: Option<p4::Uint128>) {
        self.send(Req::Arbitration(p4::MasterArbitrationUpdate {
            device_id,
            election_id: election,
            ..Default::default()
        }))
        .await;
    }
    /// The next message, or the stream's error status.
    async fn next(&mut self) -> Result<Resp, tonic::Status> {
        match tokio::time::timeout(Duration::from_secs(5), self.rx.next()).await {
            Ok(Some(Ok(m))) => Ok(m.update.expect("message has an update")),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(tonic::Status::cancelled("stream ended")),
            Err(_) => Err(tonic::Status::deadline_exceeded("no message within 5 s")),
        }
    }
    async fn arbitration_code(&mut self) -> i32 {
        match self.next().await {
            Ok(Resp::Arbitration(a)) => a.status.expect("status").code,
            other => panic!("expected an arbitration update, got {other:?}"),
        }
    }
    async fn silent(&mut self) -> bool {
        tokio::time::timeout(Duration::from_millis(300), self.rx.next())
            .await
            .is_err()
    }
}

fn set_config(
    action: p4::set_forwarding_pipeline_config_request::Action,
    with_config: bool,
) -> p4::SetForwardingPipelineConfigRequest {
    p4::SetForwardingPipelineConfigRequest {
        device_id: DEV,
        election_id: eid(5),
        action: action as i32,
        config: with_config.then(|| p4::ForwardingPipelineConfig {
            p4info: Some(p4info()),
            p4_device_config: b"/* program text */".to_vec(),
            cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie: 42 }),
        }),
        ..Default::default()
    }
}

fn lpm_entry(value: &[u8], prefix_len: i32, port: &[u8]) -> p4::TableEntry {
    p4::TableEntry {
        table_id: 1,
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Lpm(p4::field_match::Lpm {
                value: value.to_vec(),
                prefix_len,
            })),
        }],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: 10,
                params: vec![
                    p4::action::Param {
                        param_id: 1,
                        value: vec![0, 0x15, 0x4d, 0, 0, 0],
                    },
                    p4::action::Param {
                        param_id: 2,
                        value: port.to_vec(),
                    },
                ],
            })),
        }),
        ..Default::default()
    }
}

fn write_req(ty: p4::update::Type, entities: Vec<p4::entity::Entity>) -> p4::WriteRequest {
    p4::WriteRequest {
        device_id: DEV,
        election_id: eid(5),
        updates: entities
            .into_iter()
            .map(|e| p4::Update {
                r#type: ty as i32,
                entity: Some(p4::Entity { entity: Some(e) }),
            })
            .collect(),
        ..Default::default()
    }
}

async fn read(
    client: &mut P4RuntimeClient<Channel>,
    e: p4::entity::Entity,
) -> Result<Vec<p4::Entity>, tonic::Status> {
    let req = p4::ReadRequest {
        device_id: DEV,
        entities: vec![p4::Entity { entity: Some(e) }],
        ..Default::default()
    };
    let mut s = client.read(req).await?.into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.next().await {
        out.extend(r?.entities);
    }
    Ok(out)
}

/// Per-update codes from a failed Write's google.rpc.Status details.
fn per_update_codes(st: &tonic::Status) -> Vec<i32> {
    use prost::Message;
    assert_eq!(st.code(), Code::Unknown, "{st:?}");
    let rpc =
        nicflow_p4rt::proto::google::rpc::Status::decode(st.details()).expect("details decode");
    rpc.details
        .iter()
        .map(|a| {
            assert_eq!(a.type_url, "type.googleapis.com/p4.v1.Error");
            p4::Error::decode(a.value.as_slice())
                .expect("p4.v1.Error")
                .canonical_code
        })
        .collect()
}

#[tokio::test]
async fn arbitration_pipeline_and_writes() {
    use p4::set_forwarding_pipeline_config_request::Action as A;
    let mut f = start().await;
    let caps = f
        .client
        .capabilities(p4::CapabilitiesRequest {})
        .await
        .expect("capabilities")
        .into_inner();
    assert!(caps.p4runtime_api_version.starts_with("1."), "{caps:?}");

    // Nothing before arbitration.
    let e = f
        .client
        .set_forwarding_pipeline_config(set_config(A::VerifyAndCommit, true))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // Wrong device: the stream is closed with NOT_FOUND.
    let mut bad = Stream::open(&mut f.client).await;
    bad.arbitrate(DEV + 1, eid(5)).await;
    assert_eq!(bad.next().await.unwrap_err().code(), Code::NotFound);

    // First message not an arbitration: FAILED_PRECONDITION.
    let mut early = Stream::open(&mut f.client).await;
    early.send(Req::Packet(p4::PacketOut::default())).await;
    assert_eq!(
        early.next().await.unwrap_err().code(),
        Code::FailedPrecondition
    );

    let mut primary = Stream::open(&mut f.client).await;
    primary.arbitrate(DEV, eid(5)).await;
    assert_eq!(primary.arbitration_code().await, Code::Ok as i32);

    // A backup with a lower id: told ALREADY_EXISTS; the primary hears nothing.
    let mut backup = Stream::open(&mut f.client).await;
    backup.arbitrate(DEV, eid(3)).await;
    assert_eq!(backup.arbitration_code().await, Code::AlreadyExists as i32);
    assert!(primary.silent().await);

    // The same election id twice: INVALID_ARGUMENT.
    let mut dup = Stream::open(&mut f.client).await;
    dup.arbitrate(DEV, eid(5)).await;
    assert_eq!(dup.next().await.unwrap_err().code(), Code::InvalidArgument);

    // Before a pipeline: FAILED_PRECONDITION.
    let e = f
        .client
        .write(write_req(p4::update::Type::Insert, vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let got = f
        .client
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: DEV,
            response_type: 0,
        })
        .await
        .expect("get before any set")
        .into_inner();
    assert!(got.config.is_none(), "no pipeline yet: config unset");

    // VERIFY changes nothing; COMMIT needs a saved config; VERIFY_AND_SAVE + COMMIT loads it.
    f.client
        .set_forwarding_pipeline_config(set_config(A::Verify, true))
        .await
        .expect("verify");
    let e = f
        .client
        .set_forwarding_pipeline_config(set_config(A::Commit, false))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "COMMIT with nothing saved");
    f.client
        .set_forwarding_pipeline_config(set_config(A::VerifyAndSave, true))
        .await
        .expect("save");
    let got = f
        .client
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: DEV,
            response_type: 0,
        })
        .await
        .expect("get")
        .into_inner();
    assert!(got.config.is_none(), "VERIFY_AND_SAVE does not load");
    // Writes after VERIFY_AND_SAVE use the saved P4Info and are replayed at COMMIT.
    let fd = || p4::entity::Entity::TableEntry(lpm_entry(&v6(&[0xfd]), 8, &[1]));
    f.client
        .write(write_req(p4::update::Type::Insert, vec![fd()]))
        .await
        .expect("write against the saved config");
    assert_eq!(f.store.entry_count(1), 0, "not applied before COMMIT");
    f.client
        .set_forwarding_pipeline_config(set_config(A::Commit, false))
        .await
        .expect("commit");
    assert_eq!(f.store.entry_count(1), 1, "replayed at COMMIT");
    f.client
        .write(write_req(p4::update::Type::Delete, vec![fd()]))
        .await
        .expect("delete");
    let got = f
        .client
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: DEV,
            response_type: p4::get_forwarding_pipeline_config_request::ResponseType::CookieOnly
                as i32,
        })
        .await
        .expect("get")
        .into_inner()
        .config
        .expect("config");
    assert_eq!(got.cookie.map(|c| c.cookie), Some(42));
    assert!(got.p4info.is_none() && got.p4_device_config.is_empty());
    f.client
        .set_forwarding_pipeline_config(set_config(A::ReconcileAndCommit, true))
        .await
        .expect("reconcile, same P4Info");

    // Backup may not write or set the pipeline.
    let mut w = write_req(
        p4::update::Type::Insert,
        vec![p4::entity::Entity::TableEntry(lpm_entry(
            &[0xfc, 0],
            8,
            &[1],
        ))],
    );
    w.election_id = eid(3);
    assert_eq!(
        f.client.write(w).await.unwrap_err().code(),
        Code::PermissionDenied
    );

    // LPM: bits beyond the prefix, zero prefix, wide params are per-update errors; the good one lands.
    let fc00_1 = {
        let mut v = vec![0xfc, 0];
        v.extend([0u8; 13]);
        v.push(1);
        v
    };
    let r = f
        .client
        .write(write_req(
            p4::update::Type::Insert,
            vec![
                p4::entity::Entity::TableEntry(lpm_entry(&fc00_1, 64, &[1])),
                p4::entity::Entity::TableEntry(lpm_entry(&fc00_1, 128, &[1])),
                p4::entity::Entity::TableEntry(lpm_entry(&[0xfc, 0], 0, &[1])),
                p4::entity::Entity::TableEntry(lpm_entry(&fc00_1, 128, &[2, 0])),
            ],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        per_update_codes(&r),
        vec![
            Code::InvalidArgument as i32,
            Code::Ok as i32,
            Code::InvalidArgument as i32,
            Code::InvalidArgument as i32
        ]
    );
    // A DEFAULT_ONLY action in an entry (PERMISSION_DENIED: valid action, wrong
    // scope); an unknown table; then a full table.
    let mut e = lpm_entry(&v6(&[0xfd]), 8, &[1]);
    e.action = Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: 11,
            params: vec![],
        })),
    });
    let mut unknown = lpm_entry(&v6(&[0xfd]), 8, &[1]);
    unknown.table_id = 999;
    let r = f
        .client
        .write(write_req(
            p4::update::Type::Insert,
            vec![
                p4::entity::Entity::TableEntry(e),
                p4::entity::Entity::TableEntry(unknown),
                p4::entity::Entity::TableEntry(lpm_entry(&v6(&[0xfe, 0x80]), 16, &[1])),
                p4::entity::Entity::TableEntry(lpm_entry(&v6(&[0xfe, 0xc0]), 16, &[1])),
            ],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        per_update_codes(&r),
        vec![
            Code::PermissionDenied as i32,
            Code::NotFound as i32,
            Code::Ok as i32,
            Code::ResourceExhausted as i32
        ]
    );
    assert_eq!(f.store.entry_count(1), 2);

    // ROLLBACK_ON_ERROR is not offered.
    let mut w = write_req(p4::update::Type::Delete, vec![]);
    w.atomicity = p4::write_request::Atomicity::RollbackOnError as i32;
    assert_eq!(
        f.client.write(w).await.unwrap_err().code(),
        Code::Unimplemented
    );

    // Reads: without counter_data no counters; with it, the direct counter.
    let all = read(
        &mut f.client,
        p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id: 1,
            ..Default::default()
        }),
    )
    .await
    .expect("read");
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(
        |e| matches!(&e.entity, Some(p4::entity::Entity::TableEntry(t)) if t.counter_data.is_none())
    ));
    let with = read(
        &mut f.client,
        p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id: 1,
            counter_data: Some(p4::CounterData::default()),
            ..Default::default()
        }),
    )
    .await
    .expect("read");
    assert!(with.iter().all(
        |e| matches!(&e.entity, Some(p4::entity::Entity::TableEntry(t)) if t.counter_data.is_some())
    ));

    // Direct counter set on one entry and read back (key given with padding: canonicalized).
    let mut key = lpm_entry(&[&[0u8][..], &v6(&[0xfe, 0x80])].concat(), 16, &[1]);
    key.action = None;
    let dce = p4::DirectCounterEntry {
        table_entry: Some(key.clone()),
        data: Some(p4::CounterData {
            byte_count: 1500,
            packet_count: 1,
        }),
    };
    f.client
        .write(write_req(
            p4::update::Type::Modify,
            vec![p4::entity::Entity::DirectCounterEntry(dce)],
        ))
        .await
        .expect("direct counter modify");
    let got = read(
        &mut f.client,
        p4::entity::Entity::DirectCounterEntry(p4::DirectCounterEntry {
            table_entry: Some(key),
            data: None,
        }),
    )
    .await
    .expect("read direct counter");
    match got.as_slice() {
        [p4::Entity {
            entity: Some(p4::entity::Entity::DirectCounterEntry(d)),
        }] => {
            assert_eq!(
                d.data,
                Some(p4::CounterData {
                    byte_count: 1500,
                    packet_count: 1
                })
            )
        }
        other => panic!("unexpected direct counter read {other:?}"),
    }

    // Default action: DEFAULT_ONLY action allowed there.
    let def = p4::TableEntry {
        table_id: 1,
        is_default_action: true,
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: 11,
                params: vec![],
            })),
        }),
        ..Default::default()
    };
    f.client
        .write(write_req(
            p4::update::Type::Modify,
            vec![p4::entity::Entity::TableEntry(def)],
        ))
        .await
        .expect("default modify");
    let read_default = |f: &mut P4RuntimeClient<Channel>| {
        let mut f = f.clone();
        async move {
            let got = read(
                &mut f,
                p4::entity::Entity::TableEntry(p4::TableEntry {
                    table_id: 1,
                    is_default_action: true,
                    ..Default::default()
                }),
            )
            .await
            .expect("read default");
            match got.as_slice() {
                [p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(t)),
                }] => match &t.action {
                    Some(p4::TableAction {
                        r#type: Some(p4::table_action::Type::Action(a)),
                    }) => a.action_id,
                    other => panic!("default entry without action: {other:?}"),
                },
                other => panic!("expected one default entry, got {other:?}"),
            }
        }
    };
    assert_eq!(read_default(&mut f.client).await, 11, "initial default");
    let mut def10 = lpm_entry(&[1], 8, &[7]);
    def10.r#match.clear();
    def10.is_default_action = true;
    f.client
        .write(write_req(
            p4::update::Type::Modify,
            vec![p4::entity::Entity::TableEntry(def10)],
        ))
        .await
        .expect("default modify to ipv6_forward");
    assert_eq!(read_default(&mut f.client).await, 10);
    let reset = p4::TableEntry {
        table_id: 1,
        is_default_action: true,
        ..Default::default()
    };
    f.client
        .write(write_req(
            p4::update::Type::Modify,
            vec![p4::entity::Entity::TableEntry(reset)],
        ))
        .await
        .expect("default reset");
    assert_eq!(read_default(&mut f.client).await, 11, "reset to initial");

    // Indexed meters: MODIFY only; wildcard and single-index reads.
    let cfgm = p4::MeterConfig {
        cir: 100,
        cburst: 10,
        pir: 200,
        pburst: 20,
        eburst: 0,
    };
    let meter = |ty| {
        write_req(
            ty,
            vec![p4::entity::Entity::MeterEntry(p4::MeterEntry {
                meter_id: 200,
                index: Some(p4::Index { index: 2 }),
                config: Some(cfgm),
                counter_data: None,
            })],
        )
    };
    f.client
        .write(meter(p4::update::Type::Modify))
        .await
        .expect("meter modify");
    let r = f
        .client
        .write(meter(p4::update::Type::Insert))
        .await
        .unwrap_err();
    assert_eq!(per_update_codes(&r), vec![Code::InvalidArgument as i32]);
    let all = read(
        &mut f.client,
        p4::entity::Entity::MeterEntry(p4::MeterEntry {
            meter_id: 200,
            ..Default::default()
        }),
    )
    .await
    .expect("meter read");
    assert_eq!(all.len(), 4);
    let configured: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.entity {
            Some(p4::entity::Entity::MeterEntry(m)) if m.config.is_some() => {
                m.index.map(|i| (i.index, m.config))
            }
            _ => None,
        })
        .collect();
    assert_eq!(configured, vec![(2, Some(cfgm))]);
    let e = read(
        &mut f.client,
        p4::entity::Entity::MeterEntry(p4::MeterEntry {
            meter_id: 200,
            index: Some(p4::Index { index: 4 }),
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);

    // Events go to the primary only; packet-outs from a backup are refused on the stream.
    let n = f
        .store
        .emit(TargetEvent::IdleTimeout(p4::IdleTimeoutNotification {
            table_entry: vec![lpm_entry(&v6(&[0xfe, 0x80]), 16, &[1])],
            timestamp: 1,
        }));
    assert_eq!(n, 1);
    assert!(matches!(
        primary.next().await,
        Ok(Resp::IdleTimeoutNotification(_))
    ));
    assert!(backup.silent().await);
    backup
        .send(Req::Packet(p4::PacketOut {
            payload: vec![1, 2, 3],
            metadata: vec![],
        }))
        .await;
    match backup.next().await {
        Ok(Resp::Error(e)) => assert_eq!(e.canonical_code, Code::PermissionDenied as i32),
        other => panic!("expected a stream error, got {other:?}"),
    }
    assert!(f.store.packets_out().is_empty());
    backup
        .send(Req::DigestAck(p4::DigestListAck {
            digest_id: 1,
            list_id: 1,
        }))
        .await;
    match backup.next().await {
        Ok(Resp::Error(e)) => assert_eq!(e.canonical_code, Code::Unimplemented as i32),
        other => panic!("expected a stream error, got {other:?}"),
    }

    // The primary leaves: no automatic failover (P4Runtime >= 1.1); the backup
    // is told there is no primary, and becomes primary by announcing an
    // election id at least as high as any seen (5).
    drop(primary);
    assert_eq!(backup.arbitration_code().await, Code::NotFound as i32);
    let key = lpm_entry(&v6(&[0xfe, 0x80]), 16, &[1]);
    let mut w = write_req(
        p4::update::Type::Delete,
        vec![p4::entity::Entity::TableEntry(key.clone())],
    );
    w.election_id = eid(3);
    assert_eq!(
        f.client.write(w.clone()).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    backup.arbitrate(DEV, eid(6)).await;
    assert_eq!(backup.arbitration_code().await, Code::Ok as i32);
    w.election_id = eid(6);
    f.client.write(w).await.expect("new primary writes");
    assert_eq!(f.store.entry_count(1), 1);

    // A primary that lowers its id downgrades itself.
    backup.arbitrate(DEV, eid(4)).await;
    assert_eq!(backup.arbitration_code().await, Code::NotFound as i32);
    backup.arbitrate(DEV, eid(6)).await;
    assert_eq!(backup.arbitration_code().await, Code::Ok as i32);

    // A stream may not switch roles.
    backup
        .send(Req::Arbitration(p4::MasterArbitrationUpdate {
            device_id: DEV,
            election_id: eid(3),
            role: Some(p4::Role {
                name: "other".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await;
    assert_eq!(
        backup.next().await.unwrap_err().code(),
        Code::FailedPrecondition
    );

    f.server.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn shutdown_closes_open_streams() {
    let mut f = start().await;
    let mut s = Stream::open(&mut f.client).await;
    s.arbitrate(DEV, eid(1)).await;
    assert_eq!(s.arbitration_code().await, Code::Ok as i32);
    tokio::time::timeout(Duration::from_secs(5), f.server.shutdown())
        .await
        .expect("shutdown does not wait for controllers to hang up")
        .expect("clean shutdown");
    assert!(s.next().await.is_err(), "the stream ended");
}
