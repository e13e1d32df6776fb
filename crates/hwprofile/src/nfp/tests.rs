#[test]
fn dummy() {}
