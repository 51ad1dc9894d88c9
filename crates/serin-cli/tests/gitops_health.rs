//! The Argo CD health check of docs/gitops.md: its Lua block, run by Lua 5.1 (the language of Argo
//! CD's interpreter), gives the health and message the page's table promises for Canaries whose
//! status the operator's engine wrote.

use serde_json::{Value, json};
use serin_api::{Canary, Phase};
use serin_core::simulation::{World, canary, deployment, healthy};
use serin_core::{Check, MetricReading, Outcome};
use std::path::Path;
use std::process::Command;

fn gitops_page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/gitops.md");
    std::fs::read_to_string(path).expect("docs/gitops.md")
}

/// The page's ```lua block.
fn health_check() -> String {
    let page = gitops_page();
    let start = page.find("```lua\n").expect("a lua block") + "```lua\n".len();
    let end = start + page[start..].find("```").expect("the end of the lua block");
    page[start..end].to_string()
}

/// The page's expected outputs: (situation, health, message) rows of the table after "What it returns".
fn promised() -> Vec<(String, String, String)> {
    let page = gitops_page();
    let table = &page[page.find("What it returns").expect("the outputs table")..];
    table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Canary"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (
                cells[0].to_string(),
                cells[1].to_string(),
                cells[2].trim_matches('`').to_string(),
            )
        })
        .collect()
}

/// `value` as a Lua table constructor.
fn lua_literal(value: &Value) -> String {
    match value {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(lua_literal).collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("[{k:?}] = {}", lua_literal(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// Runs the health check on `canary` as Argo CD does (the object as the global `obj`).
fn argo_health(canary: &Canary) -> (String, String) {
    let object = serde_json::to_value(canary).expect("canary as JSON");
    let program = format!(
        "obj = {}\nlocal hs = (function()\n{}\nend)()\nio.write(hs.status, \"\\n\", hs.message)\n",
        lua_literal(&object),
        health_check()
    );
    let output = Command::new("lua5.1")
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(program.as_bytes())?;
            child.wait_with_output()
        })
        .expect("lua5.1 runs (apt-get install lua5.1)");
    assert!(
        output.status.success(),
        "the health check failed in Lua: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let (health, message) = text.split_once('\n').expect("two lines");
    (health.to_string(), message.to_string())
}

fn world(analysis: Value) -> World {
    let target = deployment("podinfo", "test", "ghcr.io/stefanprodan/podinfo:6.0.0", 1);
    let mut world = World::new(canary(analysis), target);
    world.reconcile();
    assert!(world.run_until(15, 5, |w| w.phase() == Some(Phase::Initialized)));
    world
}

fn analysis() -> Value {
    json!({
        "interval": "15s", "threshold": 2, "maxWeight": 20, "stepWeight": 10,
        "metrics": [{"name": "request-success-rate", "thresholdRange": {"min": 99}}]
    })
}

fn release(world: &mut World, until: Phase) {
    world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
    world.reconcile();
    assert!(
        world.run_until(15, 20, |w| w.phase() == Some(until)),
        "{:#?}",
        world.log
    );
}

/// The Canary of each row of the page's table, by the row's first cell.
fn canary_for(situation: &str) -> Canary {
    match situation {
        "no status yet" => canary(analysis()),
        "spec changed, not yet observed" => {
            let mut world = world(analysis());
            world.canary.metadata.generation = Some(2);
            world.canary
        }
        "Initialized" => world(analysis()).canary,
        "release at 10%" => {
            let mut world = world(analysis());
            world.set_target_image("ghcr.io/stefanprodan/podinfo:6.0.1");
            world.reconcile();
            assert!(world.run_until(15, 10, |w| w.status().canary_weight == 10));
            world.canary
        }
        "waiting at a confirm-promotion gate" => {
            let mut gated = analysis();
            gated["webhooks"] = json!([{"name": "gate", "type": "confirm-promotion",
                "url": "http://127.0.0.1:9/gate"}]);
            let mut world = world(gated);
            world.respond(|check: &Check, now| match check {
                Check::Hook { name, .. } if name == "gate" => Outcome::Hook(Err("closed".into())),
                other => healthy(other, now),
            });
            release(&mut world, Phase::WaitingPromotion);
            world.canary
        }
        "promoted" => {
            let mut world = world(analysis());
            release(&mut world, Phase::Succeeded);
            world.canary
        }
        "rolled back" => {
            let mut world = world(analysis());
            world.respond(|check: &Check, now| match check {
                Check::Metric { .. } => Outcome::Metric(MetricReading::Value(80.0)),
                other => healthy(other, now),
            });
            release(&mut world, Phase::Failed);
            world.canary
        }
        "invalid spec" => {
            let mut world = world(analysis());
            world.canary.spec.provider = Some("linkerd-but-misspelt".into());
            world.canary.metadata.generation = Some(2);
            world.advance(15);
            world.canary
        }
        "suspended" => {
            let mut world = world(analysis());
            world.canary.spec.suspend = Some(true);
            world.canary.metadata.generation = Some(2);
            world.advance(15);
            world.canary
        }
        other => panic!("docs/gitops.md has a row this test does not know: {other:?}"),
    }
}

#[test]
fn the_argo_cd_health_check_gives_what_the_page_promises() {
    let rows = promised();
    assert_eq!(rows.len(), 9, "one row per situation: {rows:#?}");
    for (situation, health, message) in rows {
        let (got_health, got_message) = argo_health(&canary_for(&situation));
        assert_eq!(got_health, health, "health of {situation:?}: {got_message}");
        match message.strip_suffix("...") {
            Some(prefix) => assert!(
                got_message.starts_with(prefix.trim_end_matches(' ')),
                "message of {situation:?}: {got_message:?} does not start with {prefix:?}"
            ),
            None => assert_eq!(got_message, message, "message of {situation:?}"),
        }
    }
}
