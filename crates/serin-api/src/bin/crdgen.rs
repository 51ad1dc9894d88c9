//! Prints Serin's CRDs as YAML (`make crds` writes them to artifacts/crds and charts/serin/crds);
//! with the argument `reference`, their field reference as Markdown (`make reference`).

fn main() {
    if std::env::args().nth(1).as_deref() == Some("reference") {
        print!("{}", serin_api::reference::crds_markdown());
    } else {
        print!("{}", serin_api::crd::crds_yaml());
    }
}
