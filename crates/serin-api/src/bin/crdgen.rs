//! Prints Serin's CRDs as YAML; `make crds` writes them to artifacts/crds and charts/serin/crds.

fn main() {
    print!("{}", serin_api::crd::crds_yaml());
}
